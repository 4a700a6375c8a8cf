package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	o, err := parseOptions(os.Args[1:], runtime.GOOS, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_ = o
}
