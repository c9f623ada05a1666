package transport

import (
	"encoding/binary"
	"fmt"
)

// appendStatusReport appends the fields of r (see peermsg.go) to buf.
func appendStatusReport(buf []byte, r StatusReport) ([]byte, error) {
	if len(r.Shards) > MaxReportShards {
		return buf, fmt.Errorf("status report of %d shards, over %d: %w", len(r.Shards), MaxReportShards, errBadPeerMessage)
	}
	buf, err := appendGroupStatus(buf, r.Main)
	if err != nil {
		return buf, err
	}
	buf = binary.AppendUvarint(buf, uint64(len(r.Shards)))
	for _, shard := range r.Shards {
		if shard.Shard >= MaxReportShards {
			return buf, fmt.Errorf("status report of shard %d, not below %d: %w", shard.Shard, MaxReportShards, errBadPeerMessage)
		}
		buf = binary.AppendUvarint(buf, uint64(shard.Shard))
		if buf, err = appendGroupStatus(buf, shard.GroupStatus); err != nil {
			return buf, fmt.Errorf("shard %d: %w", shard.Shard, err)
		}
	}
	return buf, nil
}

// appendGroupStatus appends one group's role and indexes to buf.
func appendGroupStatus(buf []byte, g GroupStatus) ([]byte, error) {
	if !g.Role.valid() {
		return buf, fmt.Errorf("status report role %d: %w", g.Role, errBadPeerMessage)
	}
	buf = append(buf, byte(g.Role))
	buf = binary.AppendUvarint(buf, g.Term)
	buf = binary.AppendUvarint(buf, g.Leader)
	buf = binary.AppendUvarint(buf, g.CommitIndex)
	return binary.AppendUvarint(buf, g.AppliedIndex), nil
}

func (r MemberRole) valid() bool { return r >= RoleFollower && r <= RoleLearner }

// decodeStatusReport decodes a StatusReport's fields, and nothing after.
// Every error wraps errBadPeerMessage.
func decodeStatusReport(fields []byte) (PeerMessage, error) {
	fields, main, err := decodeGroupStatus(fields)
	if err != nil {
		return nil, fmt.Errorf("status report: %w", err)
	}
	count, n := binary.Uvarint(fields)
	if n <= 0 || count > MaxReportShards {
		return nil, fmt.Errorf("status report shard count: %w", errBadPeerMessage)
	}
	fields = fields[n:]
	report := StatusReport{Main: main}
	if count > 0 {
		report.Shards = make([]ShardStatus, 0, count)
	}
	for range count {
		shard, n := binary.Uvarint(fields)
		if n <= 0 || shard >= MaxReportShards {
			return nil, fmt.Errorf("status report shard %d of %d: bad shard number: %w", len(report.Shards), count, errBadPeerMessage)
		}
		var group GroupStatus
		if fields, group, err = decodeGroupStatus(fields[n:]); err != nil {
			return nil, fmt.Errorf("status report shard %d: %w", shard, err)
		}
		report.Shards = append(report.Shards, ShardStatus{Shard: uint32(shard), GroupStatus: group})
	}
	if len(fields) != 0 {
		return nil, fmt.Errorf("status report with %d trailing bytes: %w", len(fields), errBadPeerMessage)
	}
	return report, nil
}

// decodeGroupStatus decodes one group's role and indexes from the front of
// fields and returns the rest.
func decodeGroupStatus(fields []byte) ([]byte, GroupStatus, error) {
	if len(fields) == 0 || !MemberRole(fields[0]).valid() {
		return nil, GroupStatus{}, fmt.Errorf("bad role: %w", errBadPeerMessage)
	}
	g := GroupStatus{Role: MemberRole(fields[0])}
	fields = fields[1:]
	for _, value := range []*uint64{&g.Term, &g.Leader, &g.CommitIndex, &g.AppliedIndex} {
		v, n := binary.Uvarint(fields)
		if n <= 0 {
			return nil, GroupStatus{}, fmt.Errorf("truncated index: %w", errBadPeerMessage)
		}
		*value, fields = v, fields[n:]
	}
	return fields, g, nil
}
