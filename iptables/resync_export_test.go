package iptables

// NewKernelTableWatchForTest returns the TableWatch a real Runner of that
// backend gets.
func NewKernelTableWatchForTest(nft, ipv6 bool) TableWatch {
	return &kernelWatch{nft: nft, ipv6: ipv6}
}
