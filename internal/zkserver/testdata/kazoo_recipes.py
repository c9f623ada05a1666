"""kazoo's recipes against a latch ZooKeeper listener.

Usage: kazoo_recipes.py HOST:PORT[,HOST:PORT...]
Exits 0 when every recipe behaved, 1 with the failure otherwise.
"""
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import (BadVersionError, LockTimeout, NoNodeError,
                              RolledBackError, RuntimeInconsistency)

HOSTS = sys.argv[1]
WAIT = 20  # seconds any single step may take


def client():
    c = KazooClient(hosts=HOSTS, timeout=10)
    c.start(timeout=WAIT)
    return c


# sync_note: as in ZooKeeper, a session reads what it wrote and what it has
# seen, but another session's write only after a sync (the two clients may
# be on two members, one of which has not applied that write yet). Each read
# through one client of the other's write is preceded by a sync.


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def lock(a, b):
    la, lb = a.Lock("/k/lock", "a"), b.Lock("/k/lock", "b")
    check(la.acquire(timeout=WAIT), "a acquires the free lock")
    try:
        check(not lb.acquire(timeout=0.5), "b cannot acquire a held lock")
    except LockTimeout:
        pass
    b.sync("/k/lock")  # a's write, read through b's session (see sync_note)
    check(lb.contenders() == ["a"], "contenders: %r" % lb.contenders())
    got = threading.Event()

    def waiter():
        if lb.acquire(timeout=WAIT):
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    check(not got.is_set(), "b got the lock while a holds it")
    la.release()
    t.join(WAIT)
    check(got.is_set(), "b gets the lock once a releases it")
    lb.release()


def election(a, b):
    won = []
    elected, resign = threading.Event(), threading.Event()

    def leader(name):
        won.append(name)
        elected.set()
        resign.wait(WAIT)

    t = threading.Thread(target=a.Election("/k/election", "a").run, args=(leader, "a"))
    t.start()
    check(elected.wait(WAIT), "a wins the election")
    b.sync("/k/election")
    contenders = b.Election("/k/election").contenders()
    check(contenders == ["a"], "contenders while a leads: %r" % contenders)
    resign.set()
    t.join(WAIT)
    check(won == ["a"], "won: %r" % won)


def barrier(a, b):
    bar = a.Barrier("/k/barrier")
    bar.create()
    passed = threading.Event()

    def wait():
        if b.Barrier("/k/barrier").wait(WAIT):
            passed.set()

    t = threading.Thread(target=wait)
    t.start()
    check(not passed.wait(0.5), "passed a standing barrier")
    bar.remove()
    t.join(WAIT)
    check(passed.is_set(), "passes once the barrier is removed")


def counter(a, b):
    ca, cb = a.Counter("/k/counter"), b.Counter("/k/counter")
    threads = [threading.Thread(target=lambda c=c: [c.__add__(1) for _ in range(10)]) for c in (ca, cb)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    a.sync("/k/counter")
    check(ca.value == 20, "counter after 20 concurrent increments: %r" % ca.value)


def queue(a, b):
    qa, qb = a.Queue("/k/queue"), b.Queue("/k/queue")
    for item in (b"1", b"2", b"3"):
        qa.put(item)
    b.sync("/k/queue")
    check(len(qb) == 3, "queue length %d" % len(qb))
    got = [qb.get(), qb.get(), qb.get()]
    check(got == [b"1", b"2", b"3"], "queue order %r" % got)
    check(qb.get() is None, "empty queue")


def party(a, b):
    pa, pb = a.Party("/k/party", "a"), b.Party("/k/party", "b")
    pa.join()
    pb.join()
    a.sync("/k/party")
    check(sorted(pa) == ["a", "b"], "party: %r" % sorted(pa))
    pb.leave()
    a.sync("/k/party")
    check(list(pa) == ["a"], "party after b left: %r" % list(pa))


def watches(a, b):
    a.ensure_path("/k/watched")
    children, data = [], []
    children_changed, data_changed = threading.Event(), threading.Event()

    @a.ChildrenWatch("/k/watched")
    def on_children(kids):
        children.append(sorted(kids))
        if len(children) >= 2:
            children_changed.set()

    @a.DataWatch("/k/watched")
    def on_data(value, stat):
        data.append(value)
        if len(data) >= 2:
            data_changed.set()

    b.create("/k/watched/x")
    b.set("/k/watched", b"v1")
    check(children_changed.wait(WAIT), "ChildrenWatch saw the new child: %r" % children)
    check(children[-1] == ["x"], "children %r" % children)
    check(data_changed.wait(WAIT), "DataWatch saw the change: %r" % data)
    check(data[-1] == b"v1", "data %r" % data)


def transaction(a, b):
    t = a.transaction()
    t.create("/k/txn")
    t.create("/k/txn/s-", b"x", sequence=True)
    t.create("/k/txn/e", ephemeral=True)
    t.set_data("/k/txn", b"v", version=0)
    t.check("/k/txn", 1)
    res = t.commit()
    check(len(res) == 5 and res[0] == "/k/txn" and res[1].startswith("/k/txn/s-")
          and res[2] == "/k/txn/e" and res[3].version == 1 and res[4] is True,
          "committed transaction: %r" % res)
    b.sync("/k/txn")
    check(b.get("/k/txn")[0] == b"v", "b reads the transaction's write")
    t = b.transaction()
    t.create("/k/txn/never")
    t.check("/k/txn", 7)
    t.delete("/k/txn/e")
    res = t.commit()
    check([type(r) for r in res] == [RolledBackError, BadVersionError, RuntimeInconsistency],
          "refused transaction: %r" % res)
    check(a.exists("/k/txn/never") is None, "nothing of the refused transaction applied")
    t = b.transaction()
    t.create("/k/none/x")
    res = t.commit()
    check([type(r) for r in res] == [NoNodeError], "create under a missing parent: %r" % res)
    check(a.exists("/k/none") is None, "the missing parent was not made")


def stat(a, b):
    """ctime, mtime, cversion and pzxid: within the script's clock window,
    the same through both clients (after a sync), moved by the writes."""
    before = int(time.time() * 1000)
    a.create("/k/stat", b"x")
    a.create("/k/stat/c1")
    a.create("/k/stat/c2")
    a.delete("/k/stat/c1")
    set_stat = a.set("/k/stat", b"y")
    after = int(time.time() * 1000)
    a.sync("/k/stat")
    b.sync("/k/stat")
    sa, sb = a.exists("/k/stat"), b.exists("/k/stat")
    check(sa == sb, "stats differ between clients: %r %r" % (sa, sb))
    check(before <= sa.ctime <= sa.mtime <= after,
          "ctime %d, mtime %d outside [%d, %d]" % (sa.ctime, sa.mtime, before, after))
    check(set_stat == sa, "setData replied %r, exists shows %r" % (set_stat, sa))
    check(sa.cversion == 3 and sa.numChildren == 1, "cversion %d, numChildren %d" % (sa.cversion, sa.numChildren))
    check(sa.czxid < sa.pzxid < sa.mzxid, "pzxid %d not between czxid %d and mzxid %d" % (sa.pzxid, sa.czxid, sa.mzxid))
    child = b.exists("/k/stat/c2")
    check(sa.ctime <= child.ctime == child.mtime <= sa.mtime, "child times %r" % (child,))


def main():
    a, b = client(), client()
    a.ensure_path("/k")
    for recipe in (lock, election, barrier, counter, queue, party, watches, transaction, stat):
        try:
            recipe(a, b)
        except Exception as e:  # report which recipe, then fail
            print("FAIL %s: %r" % (recipe.__name__, e))
            return 1
        print("ok %s" % recipe.__name__)
    a.stop()
    b.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
