// Package sessions keeps sessions alive: the liveness of the sessions in a
// group's replicated state, which is not replicated itself. Every server
// keeps a Liveness per group, but only the leader's deadlines matter:
//   - a heartbeat is answered by the server that receives it, without a log
//     write; a follower or learner adds the id to its relay set, and every
//     relay interval sends the set to the leader over the peer transport
//     (transport.SessionRelay), so a server cut off from the majority cannot
//     keep a session alive;
//   - the leader acknowledges every relay (transport.SessionRelayAck); a
//     follower that knows no leader, or whose relays went unacknowledged for
//     longer than the relay staleness, answers heartbeats 503 so the client
//     moves to a server that can reach the leader (a client told "alive" by a
//     cut-off server would not); a leader whose Ready loop stalled for more
//     than an election timeout does the same;
//   - the leader alone proposes expiry (one entry for every session due),
//     from deadlines on the injected monotonic clock (Config.Clock), after a
//     ReadIndex round confirmed it still leads, in an entry stamped with the
//     term whose deadlines decided it (the replica voids it in another term);
//   - a newly elected leader first grants every session a full timeout.
//
// Liveness is a replica.Listener: it learns of created and ended sessions
// from the apply path, of restores and of leader changes, and proposes and
// reads through the replica runtime. Remaining (remaining.go) shows, on
// the leader only, each session's time left, for the session listing; it
// changes nothing.
package sessions
