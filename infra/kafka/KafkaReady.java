// memstream: readiness probe for the local Kafka broker(s) (used by kafka.sh).
//
// Usage: java -cp "<kafka libs>/*:<dir>" KafkaReady <bootstrap> <timeout_s> [broker_pid[,pid...]]
//            [client.properties] [node_id[,node_id...]]
//
// Retries real Kafka requests (DescribeCluster + ListTopics via the Admin client) until they
// succeed or the timeout expires. If broker pids are given and one of them dies, gives up at once.
// With node ids (a cluster), every address of <bootstrap> is probed on its own, each must see all
// those brokers live (registered and unfenced), and the group coordinator is then looked up once,
// which creates __consumer_offsets while every broker is up (with one down, a replication factor
// of 3 could not be placed and no consumer group would work). Exit 0 = ready, 1 = not ready.
import java.io.FileInputStream;
import java.io.InputStream;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.errors.GroupIdNotFoundException;

public class KafkaReady {
    static long deadline;
    static long[] pids = new long[0];

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: KafkaReady <bootstrap> <timeout_s> [broker_pid[,pid...]] [client.properties] [node_id[,...]]");
            System.exit(2);
        }
        String bootstrap = args[0];
        deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[1]));
        if (args.length > 2 && !args[2].isEmpty()) {
            pids = java.util.Arrays.stream(args[2].split(",")).mapToLong(Long::parseLong).toArray();
        }
        Properties base = new Properties();
        if (args.length > 3 && !args[3].isEmpty()) {  // the security settings (SASL_SSL) the broker wants
            try (InputStream in = new FileInputStream(args[3])) {
                base.load(in);
            }
        }
        Set<Integer> expected = new TreeSet<>();
        if (args.length > 4 && !args[4].isEmpty()) {
            for (String id : args[4].split(",")) expected.add(Integer.parseInt(id));
        }

        if (expected.isEmpty()) {
            try (Admin admin = Admin.create(props(base, bootstrap))) {
                String ready = await(admin, expected);
                System.out.println("kafka-ready: " + ready);
            }
            System.exit(0);
        }
        String last = "";
        for (String address : bootstrap.split(",")) {
            try (Admin admin = Admin.create(props(base, address))) {
                last = await(admin, expected);
                System.out.println("kafka-ready: " + address + ": " + last);
            }
        }
        try (Admin admin = Admin.create(props(base, bootstrap))) {
            warmGroupCoordinator(admin);
        }
        System.exit(0);
    }

    static Properties props(Properties base, String bootstrap) {
        Properties p = new Properties();
        p.putAll(base);
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "memstream-kafka-ready");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "5000");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, "200");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        return p;
    }

    static void checkAlive() {
        for (long pid : pids) {
            if (pid > 0 && !ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)) {
                System.err.println("kafka-ready: broker process " + pid + " exited");
                System.exit(1);
            }
        }
    }

    static void timedOut(String last) {
        System.err.println("kafka-ready: timed out (" + last + ")");
        System.exit(1);
    }

    /** Wait until the cluster answers with live brokers (all of ``expected`` when given). */
    static String await(Admin admin, Set<Integer> expected) throws InterruptedException {
        String last = "no attempt";
        while (System.nanoTime() < deadline) {
            checkAlive();
            try {
                DescribeClusterResult c = admin.describeCluster();
                String clusterId = c.clusterId().get(5, TimeUnit.SECONDS);
                Set<Integer> live = new TreeSet<>();
                for (Node n : c.nodes().get(5, TimeUnit.SECONDS)) live.add(n.id());
                int topics = admin.listTopics().names().get(5, TimeUnit.SECONDS).size();
                if (!live.isEmpty() && live.containsAll(expected)) {
                    return "cluster " + clusterId + ", " + live.size() + " node(s) " + live + ", " + topics + " topic(s)";
                }
                last = live.isEmpty() ? "no live brokers yet" : "live brokers " + live + ", waiting for " + expected;
            } catch (Exception e) {
                Throwable t = e.getCause() != null ? e.getCause() : e;
                last = t.getClass().getSimpleName() + ": " + t.getMessage();
            }
            Thread.sleep(300);
        }
        timedOut(last);
        return last;
    }

    /** Look up a group coordinator: the broker creates __consumer_offsets for the first lookup. */
    static void warmGroupCoordinator(Admin admin) throws InterruptedException {
        String last = "no attempt";
        while (System.nanoTime() < deadline) {
            checkAlive();
            try {
                admin.listConsumerGroupOffsets("memstream-kafka-ready").partitionsToOffsetAndMetadata()
                        .get(5, TimeUnit.SECONDS);
                System.out.println("kafka-ready: group coordinator available");
                return;
            } catch (ExecutionException e) {
                if (e.getCause() instanceof GroupIdNotFoundException) {
                    System.out.println("kafka-ready: group coordinator available");
                    return;
                }
                last = e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage();
            } catch (Exception e) {
                last = e.getClass().getSimpleName() + ": " + e.getMessage();
            }
            Thread.sleep(300);
        }
        timedOut("group coordinator: " + last);
    }
}
