package watch

import (
	"encoding/json"
	"strconv"
	"sync"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

// fired is one event as it fires watches: every session queue entry it
// made points to it, so an event that fires 10,000 watches is held, and
// encoded, once. Its event and shard never change after it is made.
type fired struct {
	event fsm.Event
	shard int // whose log event.Index is of

	encodeOnce sync.Once
	// tail is the api.Event JSON of event, as encoding/json writes it,
	// from just after the watch id's value: `,"event":...}`. Set by
	// encodeOnce.
	tail []byte
}

// jsonHead is how encoding/json starts an api.Event with an empty WatchID
// (its first field, never omitted).
const jsonHead = `{"watch_id":""`

// encodedTail returns f's tail, encoding it on the first call.
func (f *fired) encodedTail() []byte {
	f.encodeOnce.Do(func() {
		ev := toAPI(0, f)
		ev.WatchID = ""
		b, err := json.Marshal(ev)
		if err != nil || len(b) < len(jsonHead) || string(b[:len(jsonHead)]) != jsonHead {
			panic("watch: unexpected JSON of api.Event: " + string(b)) // the struct's first field is watch_id
		}
		f.tail = b[len(jsonHead):]
	})
	return f.tail
}

// Delivery is one event a stream hands to its consumer (Stream.Take): the
// watch it fired and the event, shared with every other watch it fired.
type Delivery struct {
	watchID uint64
	fired   *fired
}

// Event returns the delivered event.
func (d Delivery) Event() api.Event { return toAPI(d.watchID, d.fired) }

// AppendJSON appends the JSON of d's api.Event, the bytes json.Marshal
// writes for Event(). The part that does not depend on the watch is encoded
// once per event, whatever the number of watches it fired; this appends
// the watch id and copies that part.
func (d Delivery) AppendJSON(b []byte) []byte {
	b = append(b, `{"watch_id":"`...)
	b = appendFormattedID(b, d.watchID)
	b = append(b, '"')
	return append(b, d.fired.encodedTail()...)
}

// appendFormattedID appends id as api.FormatID renders it: "0x" and 16
// lower-case hexadecimal digits.
func appendFormattedID(b []byte, id uint64) []byte {
	const zeros = "0000000000000000"
	b = append(b, "0x"...)
	digits := 1
	for v := id >> 4; v != 0; v >>= 4 {
		digits++
	}
	b = append(b, zeros[:16-digits]...)
	return strconv.AppendUint(b, id, 16)
}

func toAPI(watchID uint64, f *fired) api.Event {
	return api.Event{
		WatchID: api.FormatID(watchID),
		Event:   f.event.Kind.String(),
		Path:    f.event.Path,
		Version: f.event.Version,
		Index:   f.event.Index,
		Shard:   f.shard,
	}
}
