// memstream: readiness probe for the local Kafka broker (used by kafka.sh).
//
// Usage: java -cp "<kafka libs>/*:<dir>" KafkaReady <bootstrap> <timeout_s> [broker_pid] [client.properties]
//
// Retries real Kafka requests (DescribeCluster + ListTopics via the Admin
// client) until they succeed or the timeout expires. If broker_pid is given
// and that process dies, gives up at once. Exit 0 = ready, 1 = not ready.
import java.io.FileInputStream;
import java.io.InputStream;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;

public class KafkaReady {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: KafkaReady <bootstrap> <timeout_s> [broker_pid] [client.properties]");
            System.exit(2);
        }
        String bootstrap = args[0];
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[1]));
        long pid = args.length > 2 ? Long.parseLong(args[2]) : -1;

        Properties p = new Properties();
        if (args.length > 3) {  // the security settings (SASL_SSL) the broker wants from its clients
            try (InputStream in = new FileInputStream(args[3])) {
                p.load(in);
            }
        }
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "memstream-kafka-ready");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "5000");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, "200");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");

        String last = "no attempt";
        try (Admin admin = Admin.create(p)) {
            while (System.nanoTime() < deadline) {
                if (pid > 0 && !ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)) {
                    System.err.println("kafka-ready: broker process " + pid + " exited");
                    System.exit(1);
                }
                try {
                    DescribeClusterResult c = admin.describeCluster();
                    String clusterId = c.clusterId().get(5, TimeUnit.SECONDS);
                    int nodes = c.nodes().get(5, TimeUnit.SECONDS).size();
                    int topics = admin.listTopics().names().get(5, TimeUnit.SECONDS).size();
                    if (nodes > 0) {
                        System.out.println("kafka-ready: cluster " + clusterId + ", "
                                + nodes + " node(s), " + topics + " topic(s)");
                        System.exit(0);
                    }
                    last = "no live brokers yet";
                } catch (Exception e) {
                    Throwable t = e.getCause() != null ? e.getCause() : e;
                    last = t.getClass().getSimpleName() + ": " + t.getMessage();
                }
                Thread.sleep(300);
            }
        }
        System.err.println("kafka-ready: timed out (" + last + ")");
        System.exit(1);
    }
}
