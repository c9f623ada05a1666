package zkserver

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// TestNotificationBeforeLaterReply: ZooKeeper's ordering guarantee. Client
// a watches a node; client b changes it; a's next read, which sees the
// change, must be answered only after the watch's notification was sent
// on a's connection, so that a's client has delivered the event when the
// read returns (go-zookeeper handles frames in wire order and hands an
// event to its watch channel before it reads the next frame). Both
// clients are on one member, so that a's read sees b's write. Repeated
// with a notification for each of several watches at once, to give the
// two paths every chance to race.
func TestNotificationBeforeLaterReply(t *testing.T) {
	c := startZK(t, 1, Config{})
	a, _ := connect(t, c.addrs, 10*time.Second)
	b, _ := connect(t, c.addrs, 10*time.Second)
	const nodes = 8
	for k := range nodes {
		mustCreate(t, a, fmt.Sprintf("/o%d", k), "0")
	}
	late := 0
	for round := 1; round <= 100; round++ {
		watches := make([]<-chan zk.Event, nodes)
		for k := range nodes {
			_, _, ch, err := a.GetW(fmt.Sprintf("/o%d", k))
			if err != nil {
				t.Fatal(err)
			}
			watches[k] = ch
		}
		value := []byte(fmt.Sprint(round))
		for k := range nodes {
			if _, err := b.Set(fmt.Sprintf("/o%d", k), value, -1); err != nil {
				t.Fatal(err)
			}
		}
		got, _, err := a.Get(fmt.Sprintf("/o%d", nodes-1))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(value) {
			t.Fatalf("round %d: a read %q after b wrote %q on the same member", round, got, value)
		}
		for k, ch := range watches {
			select {
			case ev := <-ch:
				if ev.Type != zk.EventNodeDataChanged {
					t.Fatalf("round %d: watch %d got %+v", round, k, ev)
				}
			default:
				late++
				<-ch // it must still come
			}
		}
	}
	if late > 0 {
		t.Errorf("%d notifications of changes a's read had seen arrived after that read's reply", late)
	}
}
