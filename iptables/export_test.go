package iptables

// ForceFullSync makes the next Sync a full one (benchmarks, tests).
func (p *Proxier) ForceFullSync() {
	p.mu.Lock()
	p.needFull = true
	p.mu.Unlock()
}
