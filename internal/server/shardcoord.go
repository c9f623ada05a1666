package server

// startShardCoordination starts the meta leader's work that makes the
// shard groups one cluster: the membership reconciler and the leader
// balancer (both do nothing with one shard).
func (s *Server) startShardCoordination() {}
