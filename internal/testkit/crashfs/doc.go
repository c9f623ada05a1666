// Package crashfs is test support: it cuts a killed latchd's data directory
// back to what a power cut would have left, from the sync journal that
// latchd's hidden --unsafe-sync-journal flag records (vfs.Journal).
//
// The recorder and the journal's format stay in internal/vfs, because the
// product binary links them; the cut (CutToJournal), which only tests call
// (internal/testkit/proccluster's CrashLosingUnsynced), lives here, so the
// dependency points one way: crashfs imports vfs, never the reverse.
package crashfs
