package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/latch-io/latch/client"
)

// membershipTimeout bounds each step of a member replacement.
const membershipTimeout = 30 * time.Second

// replaceMember is the membership fault: a random member (the leader
// included) is removed from the cluster while clients run, and its process
// killed; the cluster runs with one voter fewer while the fault lasts. The
// heal adds a member under a name never used before as a learner in the
// same slot (same addresses, empty data directory), starts it, and
// promotes it once it caught up, by snapshot or log.
func (r *run) replaceMember() (func() error, error) {
	victim := r.faults.IntN(len(r.cluster.Members))
	old := r.cluster.Members[victim].Name
	admin, err := r.admin()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), membershipTimeout)
	defer cancel()
	if err := admin.RemoveMember(ctx, old); err != nil {
		admin.Close()
		return nil, fmt.Errorf("remove %s: %w", old, err)
	}
	r.cluster.Kill(victim)
	r.replaced++
	name := fmt.Sprintf("n%d", len(r.cluster.Members)+r.replaced)
	r.Logf("chaos: removed %s (slot %d); %s will take its place", old, victim, name)
	return func() error {
		defer admin.Close()
		return r.addMember(admin, victim, name)
	}, nil
}

// addMember adds name as a learner in slot, starts it and promotes it.
func (r *run) addMember(admin *client.Client, slot int, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), membershipTimeout)
	defer cancel()
	m := r.cluster.Members[slot]
	_, err := admin.AddMember(ctx, client.AddMemberRequest{Name: name, PeerURL: m.PeerAddr, ClientURL: m.ClientURL, Learner: true})
	if err != nil {
		return fmt.Errorf("add %s as a learner: %w", name, err)
	}
	var others []int
	for i := range r.cluster.Members {
		if i != slot {
			others = append(others, i)
		}
	}
	if err := r.cluster.Replace(slot, name, others); err != nil {
		return err
	}
	if _, err := admin.WaitPromoteMember(ctx, name); err != nil {
		return fmt.Errorf("promote %s: %w", name, err)
	}
	return nil
}

// admin is a client of every member, for membership calls (it follows the
// leader and fails over as any client does).
func (r *run) admin() (*client.Client, error) {
	c, err := client.New(client.Config{Endpoints: r.cluster.URLs(), TLS: r.harnessTLS()})
	if err != nil {
		return nil, fmt.Errorf("membership client: %w", err)
	}
	return c, nil
}
