// Package testcerts issues real X.509 certificates for tests: a CA, and
// certificates it signs for servers, clients or peers (both), with the
// validity, names and key usages a test asks for, written as PEM files.
//
// Invariants: every key is fresh (ECDSA P-256) and nothing is read from or
// written outside the directories the test gives; a certificate names the
// hosts it is issued for as IP or DNS subject alternative names.
package testcerts
