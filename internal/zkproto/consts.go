package zkproto

// OpCode is a request type (RequestHeader.Type), as ZooDefs.OpCode defines it.
type OpCode int32

// The opcodes.
const (
	OpNotification         OpCode = 0
	OpCreate               OpCode = 1
	OpDelete               OpCode = 2
	OpExists               OpCode = 3
	OpGetData              OpCode = 4
	OpSetData              OpCode = 5
	OpGetACL               OpCode = 6
	OpSetACL               OpCode = 7
	OpGetChildren          OpCode = 8
	OpSync                 OpCode = 9
	OpPing                 OpCode = 11
	OpGetChildren2         OpCode = 12
	OpCheck                OpCode = 13
	OpMulti                OpCode = 14
	OpCreate2              OpCode = 15
	OpReconfig             OpCode = 16
	OpCheckWatches         OpCode = 17
	OpRemoveWatches        OpCode = 18
	OpCreateContainer      OpCode = 19
	OpDeleteContainer      OpCode = 20
	OpCreateTTL            OpCode = 21
	OpMultiRead            OpCode = 22
	OpAuth                 OpCode = 100
	OpSetWatches           OpCode = 101
	OpSASL                 OpCode = 102
	OpGetEphemerals        OpCode = 103
	OpGetAllChildrenNumber OpCode = 104
	OpSetWatches2          OpCode = 105
	OpAddWatch             OpCode = 106
	OpWhoAmI               OpCode = 107
	OpCreateSession        OpCode = -10
	OpCloseSession         OpCode = -11
	OpError                OpCode = -1
)

// Special xids: replies and requests that are not a client's numbered call.
const (
	XidNotification int32 = -1 // a watch event pushed by the server
	XidPing         int32 = -2 // ping request and its reply
	XidAuth         int32 = -4 // auth packet and its reply
	XidSetWatches   int32 = -8 // setWatches/setWatches2 after a reconnect
)

// ErrCode is ReplyHeader.Err and MultiHeader.Err, as KeeperException.Code
// defines it.
type ErrCode int32

// The error codes.
const (
	ErrOK                       ErrCode = 0
	ErrSystemError              ErrCode = -1
	ErrRuntimeInconsistency     ErrCode = -2
	ErrDataInconsistency        ErrCode = -3
	ErrConnectionLoss           ErrCode = -4
	ErrMarshallingError         ErrCode = -5
	ErrUnimplemented            ErrCode = -6
	ErrOperationTimeout         ErrCode = -7
	ErrBadArguments             ErrCode = -8
	ErrUnknownSession           ErrCode = -12
	ErrNewConfigNoQuorum        ErrCode = -13
	ErrReconfigInProgress       ErrCode = -14
	ErrAPIError                 ErrCode = -100
	ErrNoNode                   ErrCode = -101
	ErrNoAuth                   ErrCode = -102
	ErrBadVersion               ErrCode = -103
	ErrNoChildrenForEphemerals  ErrCode = -108
	ErrNodeExists               ErrCode = -110
	ErrNotEmpty                 ErrCode = -111
	ErrSessionExpired           ErrCode = -112
	ErrInvalidCallback          ErrCode = -113
	ErrInvalidACL               ErrCode = -114
	ErrAuthFailed               ErrCode = -115
	ErrSessionMoved             ErrCode = -118
	ErrNotReadOnly              ErrCode = -119
	ErrEphemeralOnLocalSession  ErrCode = -120
	ErrNoWatcher                ErrCode = -121
	ErrRequestTimeout           ErrCode = -122
	ErrReconfigDisabled         ErrCode = -123
	ErrSessionClosedRequireSASL ErrCode = -124
	ErrQuotaExceeded            ErrCode = -125
	ErrThrottledOp              ErrCode = -127
)

// EventType is WatcherEvent.Type.
type EventType int32

// The event types.
const (
	EventNone                   EventType = -1
	EventNodeCreated            EventType = 1
	EventNodeDeleted            EventType = 2
	EventNodeDataChanged        EventType = 3
	EventNodeChildrenChanged    EventType = 4
	EventDataWatchRemoved       EventType = 5
	EventChildWatchRemoved      EventType = 6
	EventPersistentWatchRemoved EventType = 7
)

// KeeperState is WatcherEvent.State.
type KeeperState int32

// The keeper states.
const (
	StateDisconnected      KeeperState = 0
	StateSyncConnected     KeeperState = 3
	StateAuthFailed        KeeperState = 4
	StateConnectedReadOnly KeeperState = 5
	StateSaslAuthenticated KeeperState = 6
	StateExpired           KeeperState = -112
	StateClosed            KeeperState = 7
)

// CreateMode is CreateRequest.Flags.
type CreateMode int32

// The create modes.
const (
	ModePersistent                  CreateMode = 0
	ModeEphemeral                   CreateMode = 1
	ModePersistentSequential        CreateMode = 2
	ModeEphemeralSequential         CreateMode = 3
	ModeContainer                   CreateMode = 4
	ModePersistentWithTTL           CreateMode = 5
	ModePersistentSequentialWithTTL CreateMode = 6
)

// AddWatchMode is AddWatchRequest.Mode.
type AddWatchMode int32

// The addWatch modes.
const (
	AddWatchPersistent          AddWatchMode = 0
	AddWatchPersistentRecursive AddWatchMode = 1
)

// Permission bits of ACL.Perms.
const (
	PermRead   int32 = 1
	PermWrite  int32 = 2
	PermCreate int32 = 4
	PermDelete int32 = 8
	PermAdmin  int32 = 16
	PermAll    int32 = 31
)
