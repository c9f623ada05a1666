package raftnode

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// raftLogger adapts slog to raft.Logger. Raft's Fatal and Panic mean a broken
// invariant: they stop the process.
type raftLogger struct{ log *slog.Logger }

func (l raftLogger) Debug(v ...any)                 { l.log.Debug(fmt.Sprint(v...)) }
func (l raftLogger) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l raftLogger) Info(v ...any)                  { l.log.Info(fmt.Sprint(v...)) }
func (l raftLogger) Infof(format string, v ...any) {
	if routineInfo(format) {
		l.log.Debug(fmt.Sprintf(format, v...))
		return
	}
	l.log.Info(fmt.Sprintf(format, v...))
}

func (l raftLogger) Warning(v ...any) { l.log.Warn(fmt.Sprint(v...)) }
func (l raftLogger) Warningf(format string, v ...any) {
	l.log.Warn(fmt.Sprintf(format, v...))
}
func (l raftLogger) Error(v ...any)                 { l.log.Error(fmt.Sprint(v...)) }
func (l raftLogger) Errorf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }
func (l raftLogger) Fatal(v ...any)                 { l.log.Error(fmt.Sprint(v...)); os.Exit(1) }
func (l raftLogger) Fatalf(format string, v ...any) {
	l.log.Error(fmt.Sprintf(format, v...))
	os.Exit(1)
}
func (l raftLogger) Panic(v ...any) { panic(fmt.Sprint(v...)) }
func (l raftLogger) Panicf(format string, v ...any) {
	panic(fmt.Sprintf(format, v...))
}

// routineInfo reports whether raft's Info line of format is routine under
// asynchronous storage writes, not news: a Ready with no new entries still
// carries the last in-progress index in its append response, so the
// second response for an index finds it stable already ("missing from
// unstable log"), a few hundred times a second under load.
func routineInfo(format string) bool {
	return strings.Contains(format, "missing from unstable log") || strings.Contains(format, "matched unstable snapshot")
}
