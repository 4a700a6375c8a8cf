package iptables

import (
	"bytes"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"slices"
	"strings"
)

// Chunked restores. iptables-restore's cost grows faster than linearly
// with the chains one restore creates, on both backends:
//   - iptables-nft: at 10,000 services, one restore of 110,000 new chains
//     did not finish in 400 s;
//   - iptables-legacy: every chain declared with ":" is announced into
//     libxtables' fixed 512-bucket list of names that are not target
//     extensions, and every "-j" of a later rule searches that list, so
//     each process pays about N^2/1024 list steps for N chains (at
//     10,000 services, over half of a 4-5 s restore). A new process
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
func splitPayload(payload []byte, max int) [][]byte {
	natEnd := bytes.Index(payload, []byte("\nCOMMIT\n"))
	if !bytes.HasPrefix(payload, []byte("*nat\n")) || natEnd < 0 {
		return [][]byte{payload}
	}
	nat := payload[len("*nat\n") : natEnd+1]
	rest := payload[natEnd+len("\nCOMMIT\n"):] // the filter section, if any
	// The block of declarations after "*nat".
	block := map[string]bool{}
	body := nat
	for len(body) > 0 && body[0] == ':' {
		i := bytes.IndexByte(body, '\n')
		name, _, _ := strings.Cut(string(body[1:i]), " ")
		block[name] = true
		body = body[i+1:]
	}
	if len(block) <= max {
		return [][]byte{payload}
	}
	// Deletions: declared in the block, deleted at the end.
	var deletions []byte
	if i := bytes.Index(body, []byte("\n-X ")); i >= 0 {
		body, deletions = body[:i+1], body[i+1:]
	} else if bytes.HasPrefix(body, []byte("-X ")) {
		body, deletions = nil, body
	}
	deleted := map[string]bool{}
	eachLine(deletions, func(line []byte) {
		deleted[string(bytes.TrimSpace(line[3:]))] = true
	})

	var chunks [][]byte
	var decl []string
	var lines []byte
	flush := func(last bool) {
		var b []byte
		b = append(b, "*nat\n"...)
		if last {
			for c := range deleted {
				if block[c] {
					decl = append(decl, c)
				}
			}
		}
		slices.SortFunc(decl, func(a, b string) int { return strings.Compare(b, a) })
		for _, c := range decl {
			b = append(b, ':')
			b = append(b, c...)
			b = append(b, " - [0:0]\n"...)
		}
		b = append(b, lines...)
		if last {
			b = append(b, deletions...)
		}
		b = append(b, "COMMIT\n"...)
		if last {
			b = append(b, rest...)
		}
		chunks = append(chunks, b)
		decl, lines = decl[:0], nil
	}
	use := func(c string) {
		if block[c] && !deleted[c] {
			decl = append(decl, c)
			delete(block, c)
		}
	}
	prevShared := false
	eachLine(body, func(line []byte) {
		shared := false
		if len(line) > 3 && line[0] == '-' && (line[1] == 'A' || line[1] == 'I') && line[2] == ' ' {
			chain, rest := splitChain(line[3:])
			shared = string(chain) == string(xtables.ChainKubeServices) || string(chain) == string(ChainKubeNodePorts)
			if !shared && prevShared && len(decl) >= max {
				flush(false)
			}
			use(string(chain))
			if i := bytes.LastIndex(rest, []byte(" -j ")); i >= 0 {
				target, _ := splitChain(rest[i+4:])
				use(string(target))
			} else if i := bytes.LastIndex(rest, []byte(" -g ")); i >= 0 {
				target, _ := splitChain(rest[i+4:])
				use(string(target))
			}
		}
		prevShared = shared
		lines = append(lines, line...)
		lines = append(lines, '\n')
	})
	// Declared but unused (a chain with no rules, no jump to it yet).
	for c := range block {
		if !deleted[c] {
			decl = append(decl, c)
		}
	}
	flush(true)
	return chunks
}
