// Package faulthttp puts an HTTP fault-injecting proxy in front of latch
// servers, for tests of code that talks to the API (the client, its
// recipes, latchctl).
//
// A Proxy listens on its own loopback port and forwards every request to one
// backend member. Faults are rules a test switches on: answer the next n
// requests of a route with a chosen error envelope (503 with a leader hint,
// 429, 409, 410...) without forwarding them, lose the reply of a request that
// was applied, delay, drop the connection without answering (before or
// after forwarding the request), hang until the client gives up, refuse
// connections altogether (Stop), and cut the event streams that pass
// through it. Every request is recorded with its body, its
// status and, for small JSON replies, the reply body, so a test can count
// requests per route or read what was sent.
//
// Cluster runs a real in-process latch cluster (testcluster: the real
// server over the fake transport and in-memory filesystems) with one Proxy
// in front of each member; clients are given the proxies' URLs. What the
// server answers is the real server's; only the injected faults are not.
//
// It is for tests only. Waits are on conditions with deadlines.
package faulthttp
