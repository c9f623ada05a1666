// Curator's recipes against a latch ZooKeeper listener.
//
// Usage: java CuratorRecipes HOST:PORT[,HOST:PORT...]
// Prints "ok <recipe>" for each recipe that behaved, exits 1 with
// "FAIL <recipe>: ..." otherwise.

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.api.transaction.CuratorOp;
import org.apache.curator.framework.api.transaction.CuratorTransactionResult;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.data.Stat;

public class CuratorRecipes {
    static final int WAIT = 30; // seconds any single step may take
    static String hosts;

    interface Recipe {
        void run(List<CuratorFramework> clients) throws Exception;
    }

    static void check(boolean cond, String what) {
        if (!cond) {
            throw new AssertionError(what);
        }
    }

    static CuratorFramework client() throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.newClient(hosts, 15000, 10000, new ExponentialBackoffRetry(100, 10));
        c.start();
        check(c.blockUntilConnected(WAIT, TimeUnit.SECONDS), "client connects");
        return c;
    }

    // Three clients take the mutex in turns. Each holder checks, under the
    // lock, that no one else holds it (an in-process count) and that its
    // fencing token (the czxid of its own lock node, the first participant)
    // is above every earlier holder's, and records it in /curator/fence with
    // a compare-and-set at the version it read.
    static void mutex(List<CuratorFramework> clients) throws Exception {
        AtomicInteger holders = new AtomicInteger();
        AtomicLong lastToken = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        clients.get(0).create().orSetData().creatingParentsIfNeeded().forPath("/curator/fence", "0".getBytes());
        List<Thread> threads = new ArrayList<>();
        for (CuratorFramework c : clients) {
            Thread t = new Thread(() -> {
                InterProcessMutex m = new InterProcessMutex(c, "/curator/mutex");
                try {
                    for (int i = 0; i < 5; i++) {
                        check(m.acquire(WAIT, TimeUnit.SECONDS), "acquire the mutex");
                        try {
                            check(holders.incrementAndGet() == 1, "two holders of the mutex");
                            String first = m.getParticipantNodes().iterator().next();
                            long token = c.checkExists().forPath(first).getCzxid();
                            check(token > lastToken.get(), "fencing token " + token + " not above " + lastToken.get());
                            lastToken.set(token);
                            Stat st = new Stat();
                            long stored = Long.parseLong(new String(c.getData().storingStatIn(st).forPath("/curator/fence")));
                            check(stored < token, "stored token " + stored + " not below " + token);
                            c.setData().withVersion(st.getVersion()).forPath("/curator/fence", Long.toString(token).getBytes());
                            holders.decrementAndGet();
                        } finally {
                            m.release();
                        }
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join(WAIT * 5 * 1000L);
        }
        if (failure.get() != null) {
            throw new AssertionError("mutex: " + failure.get(), failure.get());
        }
    }

    static int leaders(List<LeaderLatch> latches) {
        int n = 0;
        for (LeaderLatch l : latches) {
            if (l.hasLeadership()) {
                n++;
            }
        }
        return n;
    }

    // Three latches: one leader; when it closes, another one leads.
    static void leaderLatch(List<CuratorFramework> clients) throws Exception {
        List<LeaderLatch> latches = new ArrayList<>();
        for (int i = 0; i < clients.size(); i++) {
            LeaderLatch l = new LeaderLatch(clients.get(i), "/curator/latch", "p" + i);
            l.start();
            latches.add(l);
        }
        LeaderLatch leader = null;
        for (LeaderLatch l : latches) {
            if (l.await(200, TimeUnit.MILLISECONDS)) {
                leader = l;
                break;
            }
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT);
        while (leader == null && System.nanoTime() < deadline) {
            for (LeaderLatch l : latches) {
                if (l.await(100, TimeUnit.MILLISECONDS)) {
                    leader = l;
                }
            }
        }
        check(leader != null, "no leader");
        check(leaders(latches) == 1, "leaders: " + leaders(latches));
        check(latches.get(0).getLeader().getId().equals(leader.getId()), "everyone sees the leader");
        latches.remove(leader);
        leader.close();
        deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT);
        while (leaders(latches) == 0 && System.nanoTime() < deadline) {
            Thread.sleep(20); // polling a condition, bounded by the deadline
        }
        check(leaders(latches) == 1, "leaders after the leader closed: " + leaders(latches));
        for (LeaderLatch l : latches) {
            l.close();
        }
    }

    // Three selectors take leadership in turns, never two at once.
    static void leaderSelector(List<CuratorFramework> clients) throws Exception {
        AtomicInteger leading = new AtomicInteger();
        AtomicInteger turns = new AtomicInteger();
        AtomicReference<String> failure = new AtomicReference<>();
        CountDownLatch allTurns = new CountDownLatch(6);
        List<LeaderSelector> selectors = new ArrayList<>();
        for (CuratorFramework c : clients) {
            LeaderSelector s = new LeaderSelector(c, "/curator/selector", new LeaderSelectorListenerAdapter() {
                @Override
                public void takeLeadership(CuratorFramework client) {
                    if (leading.incrementAndGet() != 1) {
                        failure.compareAndSet(null, "two leaders at once");
                    }
                    turns.incrementAndGet();
                    leading.decrementAndGet();
                    allTurns.countDown();
                }
            });
            s.autoRequeue();
            s.start();
            selectors.add(s);
        }
        check(allTurns.await(WAIT, TimeUnit.SECONDS), "leadership turns: " + turns.get());
        for (LeaderSelector s : selectors) {
            s.close();
        }
        check(failure.get() == null, String.valueOf(failure.get()));
    }

    // A CuratorCache on /curator/cache sees another client's create,
    // change and delete.
    static void cache(List<CuratorFramework> clients) throws Exception {
        CountDownLatch created = new CountDownLatch(1), changed = new CountDownLatch(1), deleted = new CountDownLatch(1);
        clients.get(0).create().creatingParentsIfNeeded().forPath("/curator/cache");
        CuratorCache cache = CuratorCache.build(clients.get(0), "/curator/cache");
        CountDownLatch initialized = new CountDownLatch(1);
        cache.listenable().addListener(CuratorCacheListener.builder()
            .forCreates(n -> { if (n.getPath().equals("/curator/cache/x")) created.countDown(); })
            .forChanges((old, n) -> { if (n.getPath().equals("/curator/cache/x") && new String(n.getData()).equals("v2")) changed.countDown(); })
            .forDeletes(n -> { if (n.getPath().equals("/curator/cache/x")) deleted.countDown(); })
            .forInitialized(initialized::countDown)
            .build());
        cache.start();
        check(initialized.await(WAIT, TimeUnit.SECONDS), "cache initialized");
        CuratorFramework other = clients.get(1);
        other.create().forPath("/curator/cache/x", "v1".getBytes());
        check(created.await(WAIT, TimeUnit.SECONDS), "cache saw the create");
        other.setData().forPath("/curator/cache/x", "v2".getBytes());
        check(changed.await(WAIT, TimeUnit.SECONDS), "cache saw the change");
        check(new String(cache.get("/curator/cache/x").get().getData()).equals("v2"), "cache holds the new data");
        other.delete().forPath("/curator/cache/x");
        check(deleted.await(WAIT, TimeUnit.SECONDS), "cache saw the delete");
        cache.close();
    }

    // Three clients increment one DistributedAtomicLong ten times each.
    static void atomicLong(List<CuratorFramework> clients) throws Exception {
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        for (CuratorFramework c : clients) {
            Thread t = new Thread(() -> {
                DistributedAtomicLong n = new DistributedAtomicLong(c, "/curator/counter", new RetryNTimes(100, 10));
                try {
                    for (int i = 0; i < 10; i++) {
                        AtomicValue<Long> v = n.increment();
                        check(v.succeeded(), "increment failed");
                        check(v.postValue() == v.preValue() + 1, "increment from " + v.preValue() + " to " + v.postValue());
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join(WAIT * 1000L);
        }
        if (failure.get() != null) {
            throw new AssertionError("atomic long: " + failure.get(), failure.get());
        }
        long value = new DistributedAtomicLong(clients.get(0), "/curator/counter", new RetryNTimes(3, 10)).get().postValue();
        check(value == 30, "counter " + value + ", want 30");
    }

    // A Curator transaction (the Java client's multi): committed, then
    // refused with the failing operation's code and nothing applied.
    static void transaction(List<CuratorFramework> clients) throws Exception {
        CuratorFramework c = clients.get(0);
        CuratorOp a = c.transactionOp().create().forPath("/curator/txn", "x".getBytes());
        CuratorOp b = c.transactionOp().create().forPath("/curator/txn/child");
        CuratorOp d = c.transactionOp().setData().withVersion(0).forPath("/curator/txn", "y".getBytes());
        List<CuratorTransactionResult> res = c.transaction().forOperations(a, b, d);
        check(res.size() == 3 && res.get(1).getForPath().equals("/curator/txn/child") && res.get(2).getResultStat().getVersion() == 1,
            "committed transaction: " + res);
        CuratorOp e = c.transactionOp().create().forPath("/curator/txn/never");
        CuratorOp f = c.transactionOp().check().withVersion(7).forPath("/curator/txn");
        try {
            c.transaction().forOperations(e, f);
            check(false, "a transaction with a wrong version was applied");
        } catch (KeeperException.BadVersionException expected) {
            // the failing operation's code
        }
        check(c.checkExists().forPath("/curator/txn/never") == null, "nothing of the refused transaction applied");
    }

    public static void main(String[] args) throws Exception {
        hosts = args[0];
        List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            clients.add(client());
        }
        String[] names = {"mutex", "leaderLatch", "leaderSelector", "cache", "atomicLong", "transaction"};
        Recipe[] recipes = {CuratorRecipes::mutex, CuratorRecipes::leaderLatch, CuratorRecipes::leaderSelector,
            CuratorRecipes::cache, CuratorRecipes::atomicLong, CuratorRecipes::transaction};
        int code = 0;
        for (int i = 0; i < recipes.length; i++) {
            try {
                recipes[i].run(clients);
                System.out.println("ok " + names[i]);
            } catch (Throwable e) {
                System.out.println("FAIL " + names[i] + ": " + e);
                e.printStackTrace(System.out);
                code = 1;
                break;
            }
        }
        for (CuratorFramework c : clients) {
            c.close();
        }
        System.out.flush();
        System.exit(code);
    }
}
