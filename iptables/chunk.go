package iptables

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// Chunked restores. iptables-restore's cost grows faster than linearly
// with the chains one restore creates, on both backends:
//   - iptables-nft: one restore of the 110,000 new chains of 10,000
//     services did not finish (BenchmarkKernelColdStart, BENCHMARKS.md);
//   - iptables-legacy: every chain declared with ":" is announced into
//     libxtables' fixed 512-bucket list of names that are not target
//     extensions, and every "-j" of a later rule searches that list, so
//     each process pays about N^2/1024 list steps for N chains (over half
//     of a large restore: BENCHMARKS.md's changelog). A new process
//     starts with an empty list; what it pays instead is reloading the
//     table the earlier chunks wrote and committing it whole again.
//
// So a full payload that creates more than the backend's limit of new nat
// chains is applied as a sequence of restores, each creating at most about
// that many. The split keeps the payload's lines in order, so the tables
// end exactly as one restore would leave them:
//   - the rules of a chain are appended in the same order whichever
//     restore carries them, and a chain is declared (created, or flushed
//     if it exists) only in the first chunk that uses it, as a rule's
//     chain or as a jump target; each chunk declares its new chains in
//     one block, in descending order, as the single payload does;
//   - chunks end only at a service boundary (after the shared rules that
//     jump into a service, which the payload writes after the service's
//     own chains), so a service is reachable only once its chains are
//     complete: the first services work before the last chunk lands;
//   - the chains to delete (-X) and the filter section go in the last
//     chunk, as do the nat KUBE-SERVICES tail rules (node ports start
//     working last).
//
// The cost of the split: the restores are separate transactions, so a
// failure midway leaves the earlier chunks applied (the next sync is full
// and converges), and a rewrite of a shared chain that exists (a full sync
// that declares it) empties it for the time the later chunks take.

// chunkChains is the number of new nat chains per restore on
// iptables-nft (about 450 services of 10 endpoints); see BENCHMARKS.md.
var chunkChains = 5000

// legacyChunkChains is the number of new nat chains per restore on
// iptables-legacy (about 5,000 services of 10 endpoints): large, because
// each extra restore reloads the table the earlier ones wrote and commits
// it whole again. At 10,000 services (111,000 chains) two restores cost
// less than one, three more than two (BENCHMARKS.md).
var legacyChunkChains = 56000

// splitPayload splits a full payload into restores creating at most about
// max new nat chains each; it returns [payload] when it creates fewer.
func splitPayload(payload restorePayload, max int) [][]byte {
	var chunks [][]byte
	splitPayloadEach(payload, max, func(c []byte) bool {
		chunks = append(chunks, c)
		return true
	})
	return chunks
}

// splitPayloadEach is splitPayload handing each chunk to emit as soon as
// it is cut (the caller restores it while the rest is split); it stops
// when emit returns false. It reads the payload's ops (ops.go): each
// rule's chain and jump target are known without parsing its line. It
// runs before the first restore of a cold start, so it copies each line
// once and allocates per chain, not per line (at 10,000 services: 434,000
// lines, 111,000 chains).
func splitPayloadEach(pl restorePayload, max int, emit func([]byte) bool) {
	payload, ops := pl.text, pl.ops
	// The nat section: ops[1:commit], lines [natStart, natEnd).
	commit := -1
	if len(ops) > 0 && ops[0].Kind == opTable && string(opName(payload, ops[0])) == string(xtables.TableNAT) {
		for i, o := range ops {
			if o.Kind == opCommit {
				commit = i
				break
			}
		}
	}
	if commit < 0 {
		emit(payload)
		return
	}
	natStart := int(ops[0].End)
	rest := payload[ops[commit].End:] // the filter section, if any
	// The block of declarations after "*nat": index of each name, and
	// whether it still waits for the chunk that first uses it.
	var names [][]byte
	first := 1 // the first op after the block
	pos := natStart
	for ; first < commit && ops[first].Kind == opDeclare; first++ {
		names = append(names, opName(payload[pos:ops[first].End-1], ops[first]))
		pos = int(ops[first].End)
	}
	if len(names) <= max {
		emit(payload)
		return
	}
	bodyStart := pos
	index := make(map[string]int32, len(names))
	for i, n := range names {
		index[string(n)] = int32(i)
	}
	pending := make([]bool, len(names))
	for i := range pending {
		pending[i] = true
	}
	// Deletions: declared in the block, deleted at the end (from the
	// first -X on).
	bodyOps := ops[first:commit]
	bodyEnd := int(ops[commit-1].End)
	if commit-1 < first {
		bodyEnd = bodyStart
	}
	var deleted []int32
	deletionsAt := bodyEnd
	for i, o := range bodyOps {
		if o.Kind != opDeleteChain {
			continue
		}
		start := bodyStart
		if i > 0 {
			start = int(bodyOps[i-1].End)
		}
		deletionsAt, bodyOps = start, bodyOps[:i]
		del := ops[first+i : commit]
		for _, o := range del {
			line := payload[start : o.End-1]
			start = int(o.End)
			if o.Kind != opDeleteChain {
				continue
			}
			if j, ok := index[string(opName(line, o))]; ok && pending[j] {
				pending[j] = false // declared in the last chunk, with the deletions
				deleted = append(deleted, j)
			}
		}
		break
	}
	body := payload[:deletionsAt] // the rules, from bodyStart
	deletions := payload[deletionsAt:bodyEnd]

	stopped := false
	// decl are the chains the current chunk declares, as indices into
	// names: the block is in descending order, so ascending indices are.
	var decl []int32
	from := bodyStart // start in payload of the current chunk's lines
	flush := func(to int, last bool) {
		if last {
			decl = append(decl, deleted...)
			// Declared but never used (a chain with no rules, no jump
			// to it yet).
			for i, p := range pending {
				if p {
					decl = append(decl, int32(i))
				}
			}
		}
		slices.Sort(decl)
		size := len("*nat\n") + (to - from) + len("COMMIT\n")
		for _, i := range decl {
			size += len(names[i]) + len(": - [0:0]\n")
		}
		if last {
			size += len(deletions) + len(rest)
		}
		b := make([]byte, 0, size)
		b = append(b, "*nat\n"...)
		for _, i := range decl {
			b = append(b, ':')
			b = append(b, names[i]...)
			b = append(b, " - [0:0]\n"...)
		}
		b = append(b, body[from:to]...)
		if last {
			b = append(b, deletions...)
		}
		b = append(b, "COMMIT\n"...)
		if last {
			b = append(b, rest...)
		}
		stopped = !emit(b)
		decl, from = decl[:0], to
	}
	// use declares c in the current chunk if it is a block chain not
	// declared yet. Lookups are skipped for what cannot be one (targets
	// such as DNAT) and for a repeat of the last chain or target (a
	// chain's rules are consecutive; KUBE-SEP chains all jump to
	// KUBE-MARK-MASQ): about 230,000 lookups instead of 870,000 at
	// 10,000 services.
	var lastChain, lastTarget []byte
	use := func(c []byte, last *[]byte) {
		if !bytes.HasPrefix(c, []byte("KUBE-")) || bytes.Equal(c, *last) {
			return
		}
		*last = c
		if i, ok := index[string(c)]; ok && pending[i] {
			pending[i] = false
			decl = append(decl, i)
		}
	}
	prevShared := false
	at := bodyStart
	for _, o := range bodyOps {
		line := payload[at : o.End-1]
		shared := false
		if o.Kind == opAppend || o.Kind == opInsert {
			chain := opName(line, o)
			shared = string(chain) == string(xtables.ChainKubeServices) || string(chain) == string(ChainKubeNodePorts)
			if !shared && prevShared && len(decl) >= max {
				if flush(at, false); stopped {
					return
				}
			}
			use(chain, &lastChain)
			if t := opTarget(line, o); t != nil {
				use(t, &lastTarget)
			}
		}
		prevShared = shared
		at = int(o.End)
	}
	flush(len(body), true)
}

// restoreChunks applies a full payload in chunks of at most p.chunk new
// nat chains, in order, splitting on another goroutine meanwhile: the
// first restore starts once its chunk is cut, not after the whole split.
func (p *Proxier) restoreChunks(ctx context.Context, payload restorePayload) error {
	chunks := make(chan []byte, 1)
	stop := make(chan struct{})
	go func() {
		defer close(chunks)
		splitPayloadEach(payload, p.chunk, func(c []byte) bool {
			select {
			case chunks <- c:
				return true
			case <-stop:
				return false
			}
		})
	}()
	n := 0
	for c := range chunks {
		n++
		if err := p.ipt.Restore(ctx, xtables.RestoreInput{Text: c}); err != nil {
			close(stop)
			for range chunks {
			}
			if n > 1 {
				return fmt.Errorf("chunk %d: %w", n, err)
			}
			return err
		}
	}
	if n > 1 {
		p.log.V(2).Info("Full sync restored in chunks", "chunks", n, "chainsPerChunk", p.chunk)
	}
	return nil
}
