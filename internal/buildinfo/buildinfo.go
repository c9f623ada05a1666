// Package buildinfo reports which build of latch is running: the module
// version and the version-control revision the Go toolchain stamped into
// the binary (runtime/debug.ReadBuildInfo). latchd --version and latchctl
// version print it.
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Unknown stands for a version or revision the binary does not record
// (a build without module support, or without version-control data).
const Unknown = "unknown"

// Info is what a binary knows about its own build.
type Info struct {
	Program   string `json:"program"`
	Version   string `json:"version"`            // the main module's version, e.g. v0.3.0 or a pseudo-version; "(devel)" when the toolchain had none
	Revision  string `json:"revision"`           // the VCS commit, or Unknown
	Time      string `json:"time,omitempty"`     // the commit's time (RFC 3339), when recorded
	Modified  bool   `json:"modified,omitempty"` // the work tree had uncommitted changes
	GoVersion string `json:"go_version"`
}

// Read returns the running binary's build information under the name program.
func Read(program string) Info {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return FromBuildInfo(program, info)
}

// FromBuildInfo extracts Info from info, which may be nil.
func FromBuildInfo(program string, info *debug.BuildInfo) Info {
	out := Info{Program: program, Version: Unknown, Revision: Unknown, GoVersion: Unknown}
	if info == nil {
		return out
	}
	if info.Main.Version != "" {
		out.Version = info.Main.Version
	}
	if info.GoVersion != "" {
		out.GoVersion = info.GoVersion
	}
	for _, setting := range info.Settings {
		switch setting.Key {
		case "vcs.revision":
			out.Revision = setting.Value
		case "vcs.time":
			out.Time = setting.Value
		case "vcs.modified":
			out.Modified = setting.Value == "true"
		}
	}
	return out
}

// String renders info on one line:
// "latchd v0.0.0-20261201143000-9159097a1b2c (revision 9159097a..., 2026-12-01T14:30:00Z, modified) go1.26.8".
func (info Info) String() string {
	details := []string{"revision " + info.Revision}
	if info.Time != "" {
		details = append(details, info.Time)
	}
	if info.Modified {
		details = append(details, "modified")
	}
	return fmt.Sprintf("%s %s (%s) %s", info.Program, info.Version, strings.Join(details, ", "), info.GoVersion)
}
