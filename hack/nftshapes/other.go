//go:build !linux

// nftshapes loads nftables tables into Linux network namespaces; elsewhere
// it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "nftshapes: needs Linux (nft, ip netns)")
	os.Exit(2)
}
