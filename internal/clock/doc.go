// Package clock is latch's seam for time: every reading of the clock and
// every timer that drives liveness (raft ticks, session deadlines, relay
// acknowledgements, leader-stall detection) goes through a Clock, so tests
// run that logic in virtual time and fault tests skew one node's clock.
//
// Three implementations:
//
//   - Real, over package time, for production.
//   - Fake, for tests: time stands still until the test calls Advance, which
//     fires every due timer and ticker in deadline order (creation order on
//     ties) before returning. BlockUntil lets a test wait, without sleeping,
//     until the code under test has armed its timers.
//   - Skewed, for fault tests: it wraps another clock (Real, or a Fake) and
//     runs at a settable rate (SetRate, 0.5x to 2x in latch's fault tests)
//     and takes wall-clock jumps (Jump).
//
// Invariants every implementation keeps, on which latch's liveness relies:
//
//  1. Now is monotonic: successive readings never go backwards, and the
//     durations between them (Since, Until, Time.Sub, Before, After of Now
//     values, and deadlines made by Now().Add) are elapsed time as this clock
//     counts it. For Real this is Go's monotonic clock reading, which a
//     change of the system clock does not move.
//  2. Wall is the clock's civil time: the only reading a jump moves. It is
//     for timestamps that are shown or stored (logs, ctime), never for
//     measuring: a jump of an hour moves Wall by an hour and leaves Now,
//     Since, Until and every timer untouched. Real's Wall is time.Now with
//     its monotonic reading stripped, so it moves with the system clock.
//  3. A time.Time from Now must stay a time.Time to keep its meaning. Its
//     UnixNano, or a value rebuilt by time.Unix, is a wall reading: in
//     production it moves when the system clock is set. Store elapsed time
//     as a time.Time or as a Duration from a Now reading, never as Unix
//     nanoseconds. (No clock here can put a jump in the wall part of a Now
//     reading, since Go cannot build a time.Time whose wall and monotonic
//     parts disagree, so Jump does not catch a breach of this rule: review
//     must.)
//  4. Readings of different clocks are not comparable: durations are taken
//     between readings of one clock only.
//  5. A timer fires when the clock, at its own rate, reaches the deadline;
//     tickers drop ticks for a slow receiver, as time.Ticker does.
package clock
