package httpapi

// RouteInfo is one route of the Handler's mux, for the tests: its pattern,
// the query parameters it takes, and whether it takes any query.
type RouteInfo struct {
	Pattern  string
	Params   []string
	AnyQuery bool
}

// Routes lists the Handler's mux routes (routeTable).
func (h *Handler) Routes() []RouteInfo {
	var out []RouteInfo
	for _, rt := range h.routeTable() {
		out = append(out, RouteInfo{Pattern: rt.pattern, Params: rt.params, AnyQuery: rt.anyQuery})
	}
	return out
}
