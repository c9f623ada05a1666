package zkserver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// curatorJars are the jars CuratorRecipes.java compiles and runs against,
// from Debian's libcurator-*-java, zookeeper, libguava-java and
// libslf4j-java (.ci/run installs them with default-jdk-headless).
var curatorJars = []string{
	"curator-framework.jar", "curator-recipes.jar", "curator-client.jar",
	"zookeeper.jar", "zookeeper-jute.jar", "guava.jar", "slf4j-api.jar", "slf4j-nop.jar",
}

// curatorClasspath returns the classpath of the Curator jars, skipping the
// test when one is absent locally.
func curatorClasspath(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("javac"); err != nil {
		t.Skipf("javac absent: install default-jdk-headless (.ci/run does)")
	}
	paths := make([]string, len(curatorJars))
	for i, jar := range curatorJars {
		paths[i] = filepath.Join("/usr/share/java", jar)
		if _, err := os.Stat(paths[i]); err != nil {
			t.Skipf("%s absent (%v): install Debian's libcurator-framework-java, libcurator-recipes-java and libcurator-client-java (.ci/run does)", jar, err)
		}
	}
	return strings.Join(paths, ":")
}

// TestCuratorRecipes: Curator's InterProcessMutex (mutual exclusion checked
// by fencing: each holder's token, the czxid of its lock node, is above
// every earlier holder's and is stored by a compare-and-set), LeaderLatch,
// LeaderSelector, CuratorCache, DistributedAtomicLong and a transaction,
// three clients on a 3-member cluster, one JVM.
func TestCuratorRecipes(t *testing.T) {
	classpath := curatorClasspath(t)
	c := startZK(t, 3, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	classes := t.TempDir()
	if out, err := exec.CommandContext(ctx, "javac", "-cp", classpath, "-d", classes, "testdata/CuratorRecipes.java").CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, "java", "-cp", classes+":"+classpath, "CuratorRecipes", strings.Join(c.addrs, ",")).CombinedOutput()
	t.Logf("curator:\n%s", out)
	if err != nil {
		t.Fatalf("curator recipes: %v", err)
	}
	for _, recipe := range []string{"mutex", "leaderLatch", "leaderSelector", "cache", "atomicLong", "transaction"} {
		if !strings.Contains(string(out), "ok "+recipe+"\n") {
			t.Fatalf("recipe %s did not report ok", recipe)
		}
	}
}
