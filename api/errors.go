package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Code is a stable, machine-readable error code of docs/api.md's error table.
type Code string

// The error codes of docs/api.md. Each maps to exactly one HTTP status (see Status).
const (
	CodeInvalidArgument    Code = "invalid_argument"
	CodeNotFound           Code = "not_found"
	CodeMethodNotAllowed   Code = "method_not_allowed"
	CodePreconditionFailed Code = "precondition_failed"
	CodeLockNotHeld        Code = "lock_not_held"
	CodeSessionExpired     Code = "session_expired"
	CodeTooLarge           Code = "too_large"
	CodeOverloaded         Code = "overloaded"
	CodeUnavailable        Code = "unavailable"
	CodeInternal           Code = "internal"
	// CodeUnauthenticated: auth is enabled and the request proves no user
	// (no or a bad token, an unknown certificate name, a wrong password).
	CodeUnauthenticated Code = "unauthenticated"
	// CodePermissionDenied: the user's roles do not allow the operation, or
	// the session named belongs to another user.
	CodePermissionDenied Code = "permission_denied"
	// CodeQuotaExceeded: a create or set would take the nodes or bytes
	// under a prefix past its quota; nothing changed.
	CodeQuotaExceeded Code = "quota_exceeded"
)

// Status returns the HTTP status that carries c.
func (c Code) Status() int {
	switch c {
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodePreconditionFailed, CodeLockNotHeld:
		return http.StatusConflict
	case CodeSessionExpired:
		return http.StatusGone
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeOverloaded:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodePermissionDenied:
		return http.StatusForbidden
	case CodeQuotaExceeded:
		return http.StatusInsufficientStorage
	default:
		return http.StatusInternalServerError
	}
}

// Error is an error with an API code. The state machine returns these for
// requests it deterministically refuses; the HTTP layer encodes them as
// {"error": {"code", "message", "leader_hint"?}}.
type Error struct {
	Code       Code   `json:"code"`
	Message    string `json:"message"`
	LeaderHint string `json:"leader_hint,omitempty"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Is makes errors.Is(err, &Error{Code: c}) match any *Error with code c.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// Errorf returns an *Error with code c and a formatted message.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

// SessionGone is the error of a request naming a session that is not live:
// expired, closed, or never created (once forgotten, these look alike).
func SessionGone(session uint64) *Error {
	return Errorf(CodeSessionExpired, "session %s has expired or was closed", FormatID(session))
}

// CodeOf returns the API code of err: the code of the *Error it wraps, or
// CodeInternal for any other non-nil error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorBody is the JSON envelope of every error reply.
type ErrorBody struct {
	Error Error `json:"error"`
}
