package fsm

import (
	"encoding/binary"

	"github.com/latch-io/latch/internal/command"
)

// writeFrames writes the auth frames of a version-6-to-9 snapshot. The
// auth frame holds the enabled flag and the counts of roles, users and
// tokens, then, only if there are quotas, their count and each quota
// (prefix, max nodes, max bytes) by prefix: a frame without quotas is as
// it was before quotas, and a reader takes a frame that ends after the
// counts as one without quotas.
func (a *authState) writeFrames(sw *snapshotWriter) {
	sw.frame(frameAuth, func(b []byte) []byte {
		enabled := byte(0)
		if a.enabled {
			enabled = 1
		}
		b = append(b, enabled)
		b = binary.AppendUvarint(b, uint64(a.roles.Len()))
		b = binary.AppendUvarint(b, uint64(a.users.Len()))
		b = binary.AppendUvarint(b, uint64(a.tokens.Len()))
		if len(a.quotas) == 0 {
			return b
		}
		b = binary.AppendUvarint(b, uint64(len(a.quotas)))
		for _, q := range a.quotas {
			b = appendString(b, q.Prefix)
			b = binary.AppendUvarint(b, q.MaxNodes)
			b = binary.AppendUvarint(b, q.MaxBytes)
		}
		return b
	})
	a.roles.Scan(func(r authRole) bool {
		sw.frame(frameRole, func(b []byte) []byte {
			b = appendString(b, r.name)
			b = binary.AppendUvarint(b, uint64(len(r.grants)))
			for _, g := range r.grants {
				b = appendString(append(b, byte(g.Perm)), g.Prefix)
			}
			return b
		})
		return sw.err == nil
	})
	a.users.Scan(func(u authUser) bool {
		sw.frame(frameUser, func(b []byte) []byte {
			b = appendString(b, u.name)
			b = appendString(b, string(u.hash))
			b = binary.AppendUvarint(b, uint64(len(u.roles)))
			for _, role := range u.roles {
				b = appendString(b, role)
			}
			return b
		})
		return sw.err == nil
	})
	a.tokens.Scan(func(t authToken) bool {
		sw.frame(frameToken, func(b []byte) []byte {
			b = appendString(b, t.digest)
			b = appendString(b, t.user)
			return binary.AppendUvarint(b, t.expires)
		})
		return sw.err == nil
	})
}

// readAuth reads the auth frames into f, checking every invariant Apply
// keeps: names valid and sorted, each user's roles and each token's user
// existing, the bounds, root present when enabled, and a state not empty.
func (sr *snapshotReader) readAuth(f *FSM) error {
	start := sr.offset
	d, err := sr.frame(frameAuth)
	if err != nil {
		return err
	}
	enabled := d.byte()
	roles, users, tokens := d.uvarint(), d.uvarint(), d.uvarint()
	quotas := readQuotas(d)
	switch {
	case d.err != nil:
	case enabled > 1:
		d.fail(d.base, "auth enabled flag %d", enabled)
	case roles > MaxRoles || users > MaxUsers || tokens > MaxUsers*MaxUserTokens:
		d.fail(d.base, "auth counts %d roles, %d users, %d tokens over the limits", roles, users, tokens)
	case enabled == 0 && roles == 0 && users == 0 && tokens == 0 && len(quotas) == 0 && !f.ownedSessions():
		d.fail(d.base, "empty auth state in a format that holds one")
	}
	if err := d.finish(); err != nil {
		return err
	}
	a := &f.auth
	a.quotas = quotas
	a.enabled = enabled == 1
	if err := sr.readRoles(a, roles); err != nil {
		return err
	}
	if err := sr.readUsers(a, users); err != nil {
		return err
	}
	if err := sr.readTokens(a, tokens); err != nil {
		return err
	}
	if _, ok := a.users.Get(authUser{name: RootUser}); a.enabled && !ok {
		return corruptf(start, "auth enabled without the user %q", RootUser)
	}
	return nil
}

// readQuotas reads the quotas that may end the auth frame: none if the
// frame ends after the counts.
func readQuotas(d *payloadDecoder) []Quota {
	if d.err != nil || d.pos == len(d.data) {
		return nil
	}
	count := d.uvarint()
	if d.err == nil && (count == 0 || count > MaxQuotas) {
		d.fail(d.base, "%d quotas: want 1 to %d when present", count, MaxQuotas)
	}
	var quotas []Quota
	for i := uint64(0); i < count && d.err == nil; i++ {
		q := Quota{Prefix: d.string(), MaxNodes: d.uvarint(), MaxBytes: d.uvarint()}
		switch {
		case d.err != nil:
		case CheckPrefix(q.Prefix) != nil || (q.MaxNodes == 0 && q.MaxBytes == 0):
			d.fail(d.base, "bad quota on %q", q.Prefix)
		case i > 0 && quotas[i-1].Prefix >= q.Prefix:
			d.fail(d.base, "quotas out of order")
		}
		quotas = append(quotas, q)
	}
	return quotas
}

func (sr *snapshotReader) readRoles(a *authState, count uint64) error {
	previous := ""
	for i := uint64(0); i < count; i++ {
		d, err := sr.frame(frameRole)
		if err != nil {
			return err
		}
		r := authRole{name: d.string()}
		grants := d.uvarint()
		if d.err == nil && grants > MaxRoleGrants {
			d.fail(d.base, "role %q has %d grants, over the limit of %d", r.name, grants, MaxRoleGrants)
		}
		for j := uint64(0); j < grants && d.err == nil; j++ {
			g := Grant{Perm: command.Perm(d.byte()), Prefix: d.string()}
			if d.err == nil && (g.Perm == command.PermNone || g.Perm > command.PermAdmin || CheckPrefix(g.Prefix) != nil) {
				d.fail(d.base, "role %q: bad grant %v on %q", r.name, g.Perm, g.Prefix)
			}
			if d.err == nil && len(r.grants) > 0 && grantCompare(r.grants[len(r.grants)-1], g) >= 0 {
				d.fail(d.base, "role %q: grants out of order", r.name)
			}
			r.grants = append(r.grants, g)
		}
		checkSortedName(d, "role", previous, r.name)
		if err := d.finish(); err != nil {
			return err
		}
		a.roles.Set(r)
		previous = r.name
	}
	return nil
}

func (sr *snapshotReader) readUsers(a *authState, count uint64) error {
	previous := ""
	for i := uint64(0); i < count; i++ {
		d, err := sr.frame(frameUser)
		if err != nil {
			return err
		}
		u := authUser{name: d.string()}
		if hash := d.bytes(); len(hash) > 0 {
			u.hash = append([]byte(nil), hash...)
		}
		roles := d.uvarint()
		if d.err == nil && (roles > MaxUserRoles || len(u.hash) > MaxSecretLen) {
			d.fail(d.base, "user %q over the limits: %d roles, a hash of %d bytes", u.name, roles, len(u.hash))
		}
		for j := uint64(0); j < roles && d.err == nil; j++ {
			role := d.string()
			if _, ok := a.roles.Get(authRole{name: role}); d.err == nil && !ok {
				d.fail(d.base, "user %q has the unknown role %q", u.name, role)
			}
			if d.err == nil && len(u.roles) > 0 && u.roles[len(u.roles)-1] >= role {
				d.fail(d.base, "user %q: roles out of order", u.name)
			}
			u.roles = append(u.roles, role)
		}
		checkSortedName(d, "user", previous, u.name)
		if err := d.finish(); err != nil {
			return err
		}
		a.users.Set(u)
		previous = u.name
	}
	return nil
}

func (sr *snapshotReader) readTokens(a *authState, count uint64) error {
	previous := ""
	for i := uint64(0); i < count; i++ {
		d, err := sr.frame(frameToken)
		if err != nil {
			return err
		}
		t := authToken{digest: d.string(), user: d.string(), expires: d.uvarint()}
		switch {
		case d.err != nil:
		case len(t.digest) != tokenDigestSize || t.expires == 0:
			d.fail(d.base, "bad token record")
		case i > 0 && t.digest <= previous:
			d.fail(d.base, "tokens out of order")
		}
		if _, ok := a.users.Get(authUser{name: t.user}); d.err == nil && !ok {
			d.fail(d.base, "token of the unknown user %q", t.user)
		}
		if err := d.finish(); err != nil {
			return err
		}
		a.tokens.Set(t)
		previous = t.digest
	}
	return nil
}

// checkSortedName fails d unless name is a valid name after previous.
func checkSortedName(d *payloadDecoder, what, previous, name string) {
	if d.err != nil {
		return
	}
	if err := checkAuthName(what, name); err != nil {
		d.fail(d.base, "%s", err.Message)
	} else if previous != "" && name <= previous {
		d.fail(d.base, "%ss out of order: %q after %q", what, name, previous)
	}
}

// ownedSessions reports whether a session has an owner.
func (f *FSM) ownedSessions() bool {
	owned := false
	f.sessions.Scan(func(s session) bool {
		owned = s.owner != ""
		return !owned
	})
	return owned
}
