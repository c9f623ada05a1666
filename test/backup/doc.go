// Package backup tests latch's backup and restore end to end with real
// processes: 'latchctl snapshot save' from a 3-member latchd cluster under
// write load, 'latchctl snapshot status', and 'latchd restore' seeding a new
// 3-member cluster from the file (docs/operations.md "Backup and restore").
//
// What the tests show:
//
//   - TestSaveUnderLoadAndRestore: every write acknowledged at or below the
//     backup's index is in the restored cluster with its value, and none
//     above it; the old cluster's sessions are gone and their ephemeral
//     nodes with them; a lock acquired after the restore gets a fencing
//     token above every token the old cluster issued, even after the
//     backup; a sequential create names a node above every name issued
//     before.
//   - TestStatusRefusesDamagedFiles: a truncated or bit-flipped backup file
//     is refused by 'snapshot status' with the file's name and the byte
//     offset (internal/cli's TestSnapshotSaveRefusesBadStreams shows that a
//     cut or damaged stream is never saved).
package backup
