package ipvs

import "github.com/svcproxy/svcproxy/proxy/conntrack"

// ConntrackFilter lets the external tests name the filter type.
type ConntrackFilter = conntrack.Filter
