package raftnode

import (
	"fmt"
	"log/slog"
	"os"
)

// raftLogger adapts slog to raft.Logger. Raft's Fatal and Panic mean a broken
// invariant: they stop the process.
type raftLogger struct{ log *slog.Logger }

func (l raftLogger) Debug(v ...any)                 { l.log.Debug(fmt.Sprint(v...)) }
func (l raftLogger) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l raftLogger) Info(v ...any)                  { l.log.Info(fmt.Sprint(v...)) }
func (l raftLogger) Infof(format string, v ...any)  { l.log.Info(fmt.Sprintf(format, v...)) }
func (l raftLogger) Warning(v ...any)               { l.log.Warn(fmt.Sprint(v...)) }
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
