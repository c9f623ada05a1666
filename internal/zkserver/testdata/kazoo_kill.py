"""A kazoo Lock held through a member that is killed with SIGKILL.

Usage: kazoo_kill.py HOST:PORT[,HOST:PORT...]
Prints "holding HOST:PORT" (the member the holder is connected to), then
waits for a line "killed" on stdin; prints "ok kill" when the holder kept
its session and its lock across the reconnect and a waiter got the lock
only after the holder released it. Exits 1 with the failure otherwise.
"""
import sys
import threading

from kazoo.client import KazooClient, KazooState

HOSTS = sys.argv[1]
WAIT = 30  # seconds any single step may take


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    holder = KazooClient(hosts=HOSTS, timeout=10)
    holder.start(timeout=WAIT)
    states = []
    holder.add_listener(lambda s: states.append(s))
    lock = holder.Lock("/kill/lock", "holder")
    check(lock.acquire(timeout=WAIT), "holder acquires the lock")
    session = holder.client_id[0]
    peer = holder._connection._socket.getpeername()
    print("holding %s:%d" % (peer[0], peer[1]), flush=True)

    if sys.stdin.readline().strip() != "killed":
        raise AssertionError("no kill notice on stdin")
    waiter = KazooClient(hosts=HOSTS, timeout=10)
    waiter.start(timeout=WAIT)
    released = threading.Event()
    result = {}

    def wait_lock():
        got = waiter.Lock("/kill/lock", "waiter").acquire(timeout=WAIT)
        result["got"], result["after_release"] = got, released.is_set()

    t = threading.Thread(target=wait_lock)
    t.start()
    # The holder reconnects elsewhere: a session lost would show as LOST.
    check(holder.exists("/kill/lock") is not None, "the lock's parent after the reconnect")
    check(holder._connection._socket.getpeername() != peer, "holder still on the killed member")
    check(holder.client_id[0] == session, "holder's session changed")
    check(KazooState.LOST not in states, "holder's session was lost: %r" % states)
    check(lock.is_acquired, "kazoo says the lock is no longer held")
    contenders = waiter.Lock("/kill/lock").contenders()
    check(contenders[:1] == ["holder"], "contenders after the reconnect: %r" % contenders)
    check("got" not in result, "the waiter got the lock while the holder held it")
    released.set()
    lock.release()
    t.join(WAIT)
    check(result.get("got") and result.get("after_release"), "waiter: %r" % result)
    print("ok kill", flush=True)
    holder.stop()
    waiter.stop()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:
        print("FAIL kill: %r" % e, flush=True)
        sys.exit(1)
