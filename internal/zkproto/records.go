package zkproto

// Record is one jute record: it encodes itself to a Writer and decodes
// itself from a Reader (errors stick in the Reader).
type Record interface {
	Encode(w *Writer)
	Decode(r *Reader)
}

// Encode returns rec's bytes (without a frame length).
func Encode(rec Record) []byte {
	w := NewWriter(nil)
	rec.Encode(w)
	return w.Bytes()
}

// Decode decodes buf, which must hold exactly one rec, into rec.
func Decode(buf []byte, rec Record, name string) error {
	return NewReader(buf).Record(rec, name)
}

// ConnectRequest opens or resumes a session. ReadOnly is a trailing field
// that older clients (and go-zookeeper) omit; HasReadOnly says whether it was
// on the wire, and Encode writes it only when HasReadOnly is set.
type ConnectRequest struct {
	ProtocolVersion int32
	LastZxidSeen    int64
	TimeOut         int32
	SessionID       int64
	Passwd          []byte
	ReadOnly        bool
	HasReadOnly     bool
}

// Encode implements Record.
func (c *ConnectRequest) Encode(w *Writer) {
	w.Int(c.ProtocolVersion)
	w.Long(c.LastZxidSeen)
	w.Int(c.TimeOut)
	w.Long(c.SessionID)
	w.Buffer(c.Passwd)
	if c.HasReadOnly {
		w.Bool(c.ReadOnly)
	}
}

// Decode implements Record: the readOnly byte is read if exactly one byte
// remains after passwd.
func (c *ConnectRequest) Decode(r *Reader) {
	c.ProtocolVersion = r.Int("ConnectRequest.protocolVersion")
	c.LastZxidSeen = r.Long("ConnectRequest.lastZxidSeen")
	c.TimeOut = r.Int("ConnectRequest.timeOut")
	c.SessionID = r.Long("ConnectRequest.sessionId")
	c.Passwd = r.Buffer("ConnectRequest.passwd")
	c.ReadOnly, c.HasReadOnly = false, false
	if r.Err() == nil && r.Remaining() == 1 {
		c.ReadOnly = r.Bool("ConnectRequest.readOnly")
		c.HasReadOnly = true
	}
}

// ConnectResponse answers a ConnectRequest; HasReadOnly as in ConnectRequest
// (answer in the form asked).
type ConnectResponse struct {
	ProtocolVersion int32
	TimeOut         int32
	SessionID       int64
	Passwd          []byte
	ReadOnly        bool
	HasReadOnly     bool
}

// Encode implements Record.
func (c *ConnectResponse) Encode(w *Writer) {
	w.Int(c.ProtocolVersion)
	w.Int(c.TimeOut)
	w.Long(c.SessionID)
	w.Buffer(c.Passwd)
	if c.HasReadOnly {
		w.Bool(c.ReadOnly)
	}
}

// Decode implements Record.
func (c *ConnectResponse) Decode(r *Reader) {
	c.ProtocolVersion = r.Int("ConnectResponse.protocolVersion")
	c.TimeOut = r.Int("ConnectResponse.timeOut")
	c.SessionID = r.Long("ConnectResponse.sessionId")
	c.Passwd = r.Buffer("ConnectResponse.passwd")
	c.ReadOnly, c.HasReadOnly = false, false
	if r.Err() == nil && r.Remaining() == 1 {
		c.ReadOnly = r.Bool("ConnectResponse.readOnly")
		c.HasReadOnly = true
	}
}

// RequestHeader starts every request after the handshake.
type RequestHeader struct {
	Xid  int32
	Type OpCode
}

// Encode implements Record.
func (h *RequestHeader) Encode(w *Writer) { w.Int(h.Xid); w.Int(int32(h.Type)) }

// Decode implements Record.
func (h *RequestHeader) Decode(r *Reader) {
	h.Xid = r.Int("RequestHeader.xid")
	h.Type = OpCode(r.Int("RequestHeader.type"))
}

// ReplyHeader starts every reply and notification.
type ReplyHeader struct {
	Xid  int32
	Zxid int64
	Err  ErrCode
}

// Encode implements Record.
func (h *ReplyHeader) Encode(w *Writer) { w.Int(h.Xid); w.Long(h.Zxid); w.Int(int32(h.Err)) }

// Decode implements Record.
func (h *ReplyHeader) Decode(r *Reader) {
	h.Xid = r.Int("ReplyHeader.xid")
	h.Zxid = r.Long("ReplyHeader.zxid")
	h.Err = ErrCode(r.Int("ReplyHeader.err"))
}

// Stat is a node's metadata, 68 bytes on the wire.
type Stat struct {
	Czxid          int64
	Mzxid          int64
	Ctime          int64
	Mtime          int64
	Version        int32
	Cversion       int32
	Aversion       int32
	EphemeralOwner int64
	DataLength     int32
	NumChildren    int32
	Pzxid          int64
}

// Encode implements Record.
func (s *Stat) Encode(w *Writer) {
	w.Long(s.Czxid)
	w.Long(s.Mzxid)
	w.Long(s.Ctime)
	w.Long(s.Mtime)
	w.Int(s.Version)
	w.Int(s.Cversion)
	w.Int(s.Aversion)
	w.Long(s.EphemeralOwner)
	w.Int(s.DataLength)
	w.Int(s.NumChildren)
	w.Long(s.Pzxid)
}

// Decode implements Record.
func (s *Stat) Decode(r *Reader) {
	s.Czxid = r.Long("Stat.czxid")
	s.Mzxid = r.Long("Stat.mzxid")
	s.Ctime = r.Long("Stat.ctime")
	s.Mtime = r.Long("Stat.mtime")
	s.Version = r.Int("Stat.version")
	s.Cversion = r.Int("Stat.cversion")
	s.Aversion = r.Int("Stat.aversion")
	s.EphemeralOwner = r.Long("Stat.ephemeralOwner")
	s.DataLength = r.Int("Stat.dataLength")
	s.NumChildren = r.Int("Stat.numChildren")
	s.Pzxid = r.Long("Stat.pzxid")
}

// ID is an ACL identity (scheme:id).
type ID struct {
	Scheme string
	ID     string
}

// ACL is one access control entry.
type ACL struct {
	Perms int32
	ID    ID
}

// aclMinSize is the smallest ACL on the wire: perms and two empty strings.
const aclMinSize = 12

func writeACLs(w *Writer, acls []ACL) {
	w.VectorLen(len(acls), acls == nil)
	for _, a := range acls {
		w.Int(a.Perms)
		w.String(a.ID.Scheme)
		w.String(a.ID.ID)
	}
}

func readACLs(r *Reader, field string) []ACL {
	n := r.VectorLen(field, aclMinSize)
	if r.Err() != nil || n < 0 {
		return nil
	}
	out := make([]ACL, 0, n)
	for i := 0; i < n && r.Err() == nil; i++ {
		var a ACL
		a.Perms = r.Int(field + ".perms")
		a.ID.Scheme = r.String(field + ".id.scheme")
		a.ID.ID = r.String(field + ".id.id")
		out = append(out, a)
	}
	return out
}

// CreateRequest is the body of create (1), create2 (15) and createContainer
// (19).
type CreateRequest struct {
	Path  string
	Data  []byte
	ACL   []ACL
	Flags CreateMode
}

// Encode implements Record.
func (c *CreateRequest) Encode(w *Writer) {
	w.String(c.Path)
	w.Buffer(c.Data)
	writeACLs(w, c.ACL)
	w.Int(int32(c.Flags))
}

// Decode implements Record.
func (c *CreateRequest) Decode(r *Reader) {
	c.Path = r.String("CreateRequest.path")
	c.Data = r.Buffer("CreateRequest.data")
	c.ACL = readACLs(r, "CreateRequest.acl")
	c.Flags = CreateMode(r.Int("CreateRequest.flags"))
}

// CreateTTLRequest is the body of createTTL (21).
type CreateTTLRequest struct {
	Path  string
	Data  []byte
	ACL   []ACL
	Flags CreateMode
	TTL   int64
}

// Encode implements Record.
func (c *CreateTTLRequest) Encode(w *Writer) {
	w.String(c.Path)
	w.Buffer(c.Data)
	writeACLs(w, c.ACL)
	w.Int(int32(c.Flags))
	w.Long(c.TTL)
}

// Decode implements Record.
func (c *CreateTTLRequest) Decode(r *Reader) {
	c.Path = r.String("CreateTTLRequest.path")
	c.Data = r.Buffer("CreateTTLRequest.data")
	c.ACL = readACLs(r, "CreateTTLRequest.acl")
	c.Flags = CreateMode(r.Int("CreateTTLRequest.flags"))
	c.TTL = r.Long("CreateTTLRequest.ttl")
}

// CreateResponse answers create.
type CreateResponse struct{ Path string }

// Encode implements Record.
func (c *CreateResponse) Encode(w *Writer) { w.String(c.Path) }

// Decode implements Record.
func (c *CreateResponse) Decode(r *Reader) { c.Path = r.String("CreateResponse.path") }

// Create2Response answers create2, createContainer and createTTL.
type Create2Response struct {
	Path string
	Stat Stat
}

// Encode implements Record.
func (c *Create2Response) Encode(w *Writer) { w.String(c.Path); c.Stat.Encode(w) }

// Decode implements Record.
func (c *Create2Response) Decode(r *Reader) {
	c.Path = r.String("Create2Response.path")
	c.Stat.Decode(r)
}

// DeleteRequest is the body of delete (2).
type DeleteRequest struct {
	Path    string
	Version int32
}

// Encode implements Record.
func (d *DeleteRequest) Encode(w *Writer) { w.String(d.Path); w.Int(d.Version) }

// Decode implements Record.
func (d *DeleteRequest) Decode(r *Reader) {
	d.Path = r.String("DeleteRequest.path")
	d.Version = r.Int("DeleteRequest.version")
}

// CheckVersionRequest is the body of check (13) inside a multi.
type CheckVersionRequest struct {
	Path    string
	Version int32
}

// Encode implements Record.
func (c *CheckVersionRequest) Encode(w *Writer) { w.String(c.Path); w.Int(c.Version) }

// Decode implements Record.
func (c *CheckVersionRequest) Decode(r *Reader) {
	c.Path = r.String("CheckVersionRequest.path")
	c.Version = r.Int("CheckVersionRequest.version")
}

// PathWatchRequest is the body of exists (3), getData (4), getChildren (8)
// and getChildren2 (12): a path and whether to leave a watch.
type PathWatchRequest struct {
	Path  string
	Watch bool
}

// Encode implements Record.
func (p *PathWatchRequest) Encode(w *Writer) { w.String(p.Path); w.Bool(p.Watch) }

// Decode implements Record.
func (p *PathWatchRequest) Decode(r *Reader) {
	p.Path = r.String("PathWatchRequest.path")
	p.Watch = r.Bool("PathWatchRequest.watch")
}

// PathRequest is the body of sync (9), getACL (6), getAllChildrenNumber
// (104) and getEphemerals (103), and the body of SyncResponse.
type PathRequest struct{ Path string }

// Encode implements Record.
func (p *PathRequest) Encode(w *Writer) { w.String(p.Path) }

// Decode implements Record.
func (p *PathRequest) Decode(r *Reader) { p.Path = r.String("PathRequest.path") }

// StatResponse is the body of the exists, setData and setACL replies.
type StatResponse struct{ Stat Stat }

// Encode implements Record.
func (s *StatResponse) Encode(w *Writer) { s.Stat.Encode(w) }

// Decode implements Record.
func (s *StatResponse) Decode(r *Reader) { s.Stat.Decode(r) }

// GetDataResponse answers getData.
type GetDataResponse struct {
	Data []byte
	Stat Stat
}

// Encode implements Record.
func (g *GetDataResponse) Encode(w *Writer) { w.Buffer(g.Data); g.Stat.Encode(w) }

// Decode implements Record.
func (g *GetDataResponse) Decode(r *Reader) {
	g.Data = r.Buffer("GetDataResponse.data")
	g.Stat.Decode(r)
}

// SetDataRequest is the body of setData (5).
type SetDataRequest struct {
	Path    string
	Data    []byte
	Version int32
}

// Encode implements Record.
func (s *SetDataRequest) Encode(w *Writer) { w.String(s.Path); w.Buffer(s.Data); w.Int(s.Version) }

// Decode implements Record.
func (s *SetDataRequest) Decode(r *Reader) {
	s.Path = r.String("SetDataRequest.path")
	s.Data = r.Buffer("SetDataRequest.data")
	s.Version = r.Int("SetDataRequest.version")
}

// GetChildrenResponse answers getChildren; Children is also the body of
// GetEphemeralsResponse.
type GetChildrenResponse struct{ Children []string }

// Encode implements Record.
func (g *GetChildrenResponse) Encode(w *Writer) { w.Strings(g.Children) }

// Decode implements Record.
func (g *GetChildrenResponse) Decode(r *Reader) {
	g.Children = r.Strings("GetChildrenResponse.children")
}

// GetChildren2Response answers getChildren2.
type GetChildren2Response struct {
	Children []string
	Stat     Stat
}

// Encode implements Record.
func (g *GetChildren2Response) Encode(w *Writer) { w.Strings(g.Children); g.Stat.Encode(w) }

// Decode implements Record.
func (g *GetChildren2Response) Decode(r *Reader) {
	g.Children = r.Strings("GetChildren2Response.children")
	g.Stat.Decode(r)
}

// SetACLRequest is the body of setACL (7).
type SetACLRequest struct {
	Path    string
	ACL     []ACL
	Version int32
}

// Encode implements Record.
func (s *SetACLRequest) Encode(w *Writer) { w.String(s.Path); writeACLs(w, s.ACL); w.Int(s.Version) }

// Decode implements Record.
func (s *SetACLRequest) Decode(r *Reader) {
	s.Path = r.String("SetACLRequest.path")
	s.ACL = readACLs(r, "SetACLRequest.acl")
	s.Version = r.Int("SetACLRequest.version")
}

// GetACLResponse answers getACL.
type GetACLResponse struct {
	ACL  []ACL
	Stat Stat
}

// Encode implements Record.
func (g *GetACLResponse) Encode(w *Writer) { writeACLs(w, g.ACL); g.Stat.Encode(w) }

// Decode implements Record.
func (g *GetACLResponse) Decode(r *Reader) {
	g.ACL = readACLs(r, "GetACLResponse.acl")
	g.Stat.Decode(r)
}

// WatcherEvent is the body of a notification (xid -1).
type WatcherEvent struct {
	Type  EventType
	State KeeperState
	Path  string
}

// Encode implements Record.
func (e *WatcherEvent) Encode(w *Writer) {
	w.Int(int32(e.Type))
	w.Int(int32(e.State))
	w.String(e.Path)
}

// Decode implements Record.
func (e *WatcherEvent) Decode(r *Reader) {
	e.Type = EventType(r.Int("WatcherEvent.type"))
	e.State = KeeperState(r.Int("WatcherEvent.state"))
	e.Path = r.String("WatcherEvent.path")
}

// SetWatches is the body of setWatches (101); SetWatches2 (105) adds the
// persistent and persistent-recursive lists (Has2 set).
type SetWatches struct {
	RelativeZxid               int64
	DataWatches                []string
	ExistWatches               []string
	ChildWatches               []string
	PersistentWatches          []string
	PersistentRecursiveWatches []string
	// Has2 selects the SetWatches2 form.
	Has2 bool
}

// Encode implements Record.
func (s *SetWatches) Encode(w *Writer) {
	w.Long(s.RelativeZxid)
	w.Strings(s.DataWatches)
	w.Strings(s.ExistWatches)
	w.Strings(s.ChildWatches)
	if s.Has2 {
		w.Strings(s.PersistentWatches)
		w.Strings(s.PersistentRecursiveWatches)
	}
}

// Decode implements Record; set Has2 before decoding a SetWatches2.
func (s *SetWatches) Decode(r *Reader) {
	s.RelativeZxid = r.Long("SetWatches.relativeZxid")
	s.DataWatches = r.Strings("SetWatches.dataWatches")
	s.ExistWatches = r.Strings("SetWatches.existWatches")
	s.ChildWatches = r.Strings("SetWatches.childWatches")
	if s.Has2 {
		s.PersistentWatches = r.Strings("SetWatches2.persistentWatches")
		s.PersistentRecursiveWatches = r.Strings("SetWatches2.persistentRecursiveWatches")
	}
}

// MultiHeader precedes each operation of a multi request and each result of
// its reply; a header with Done set (type -1, err -1) ends the list.
type MultiHeader struct {
	Type OpCode
	Done bool
	Err  ErrCode
}

// Encode implements Record.
func (m *MultiHeader) Encode(w *Writer) { w.Int(int32(m.Type)); w.Bool(m.Done); w.Int(int32(m.Err)) }

// Decode implements Record.
func (m *MultiHeader) Decode(r *Reader) {
	m.Type = OpCode(r.Int("MultiHeader.type"))
	m.Done = r.Bool("MultiHeader.done")
	m.Err = ErrCode(r.Int("MultiHeader.err"))
}

// ErrorResponse is the body of a failed operation in a multi reply.
type ErrorResponse struct{ Err ErrCode }

// Encode implements Record.
func (e *ErrorResponse) Encode(w *Writer) { w.Int(int32(e.Err)) }

// Decode implements Record.
func (e *ErrorResponse) Decode(r *Reader) { e.Err = ErrCode(r.Int("ErrorResponse.err")) }

// PathTypeRequest is the body of checkWatches (17) and removeWatches (18)
// (type: 1 child, 2 data, 3 any) and of addWatch (106) (type: the mode).
type PathTypeRequest struct {
	Path string
	Type int32
}

// Encode implements Record.
func (p *PathTypeRequest) Encode(w *Writer) { w.String(p.Path); w.Int(p.Type) }

// Decode implements Record.
func (p *PathTypeRequest) Decode(r *Reader) {
	p.Path = r.String("PathTypeRequest.path")
	p.Type = r.Int("PathTypeRequest.type")
}

// AuthPacket is the body of auth (100, xid -4).
type AuthPacket struct {
	Type   int32
	Scheme string
	Auth   []byte
}

// Encode implements Record.
func (a *AuthPacket) Encode(w *Writer) { w.Int(a.Type); w.String(a.Scheme); w.Buffer(a.Auth) }

// Decode implements Record.
func (a *AuthPacket) Decode(r *Reader) {
	a.Type = r.Int("AuthPacket.type")
	a.Scheme = r.String("AuthPacket.scheme")
	a.Auth = r.Buffer("AuthPacket.auth")
}

// IntResponse is the body of GetAllChildrenNumberResponse (totalNumber).
type IntResponse struct{ Value int32 }

// Encode implements Record.
func (i *IntResponse) Encode(w *Writer) { w.Int(i.Value) }

// Decode implements Record.
func (i *IntResponse) Decode(r *Reader) { i.Value = r.Int("IntResponse.value") }

// NewRequestBody returns the zero record that follows a RequestHeader of
// type op, or false for an opcode with no body (ping, closeSession, whoAmI)
// or one this package does not decode as a single record (multi and
// multiRead are a sequence of MultiHeader and bodies ended by a done
// header, read by the caller; reconfig and sasl are not decoded).
func NewRequestBody(op OpCode) (Record, bool) {
	switch op {
	case OpCreate, OpCreate2, OpCreateContainer:
		return &CreateRequest{}, true
	case OpCreateTTL:
		return &CreateTTLRequest{}, true
	case OpDelete, OpDeleteContainer:
		return &DeleteRequest{}, true
	case OpCheck:
		return &CheckVersionRequest{}, true
	case OpExists, OpGetData, OpGetChildren, OpGetChildren2:
		return &PathWatchRequest{}, true
	case OpSync, OpGetACL, OpGetAllChildrenNumber, OpGetEphemerals:
		return &PathRequest{}, true
	case OpSetData:
		return &SetDataRequest{}, true
	case OpSetACL:
		return &SetACLRequest{}, true
	case OpCheckWatches, OpRemoveWatches, OpAddWatch:
		return &PathTypeRequest{}, true
	case OpAuth:
		return &AuthPacket{}, true
	case OpSetWatches:
		return &SetWatches{}, true
	case OpSetWatches2:
		return &SetWatches{Has2: true}, true
	}
	return nil, false
}
