// Readiness probe for the local stack's Cassandra: a CQL query on system.local through the Java
// driver that ships with cassandra-all, retried in one JVM until the deadline.
//   java -cp '<cassandra lib>/*' CassandraProbe.java 127.0.0.1 9042 <timeout-seconds>
// The secure stack's (stack.sh, WEIR_STACK_SECURE=1): over TLS, trusting the CA of CA_PEM only,
// with a login; then runs each CQL statement given, in order (within the retries: make them
// idempotent).
//   java -cp '<cassandra lib>/*' CassandraProbe.java 127.0.0.1 19142 <timeout-seconds> \
//       CA_PEM USER PASSWORD [CQL...]
import java.io.FileInputStream;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.util.Arrays;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

public class CassandraProbe {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[2]) * 1000;
        String[] secure = args.length > 3 ? Arrays.copyOfRange(args, 3, args.length) : null;
        if (secure != null && secure.length < 3) {
            System.err.println("usage: CassandraProbe HOST PORT TIMEOUT [CA_PEM USER PASSWORD [CQL...]]");
            System.exit(2);
        }
        Exception last = null;
        while (System.currentTimeMillis() < deadline) {
            try {
                System.out.println(ask(host, port, secure));
                return;
            } catch (Exception e) {
                last = e;
                Thread.sleep(500);
            }
        }
        System.err.println("cassandra at " + host + ":" + port + " did not answer: " + last);
        System.exit(1);
    }

    static String ask(String host, int port, String[] secure) throws Exception {
        var builder = com.datastax.driver.core.Cluster.builder()
                .addContactPoint(host).withPort(port).withoutJMXReporting();
        if (secure != null) {
            builder.withSSL(com.datastax.driver.core.RemoteEndpointAwareJdkSSLOptions.builder()
                            .withSSLContext(trusting(secure[0])).build())
                    .withCredentials(secure[1], secure[2]);
        }
        try (var cluster = builder.build();
             var session = cluster.connect()) {
            var row = session.execute("SELECT release_version FROM system.local").one();
            String ran = "";
            if (secure != null && secure.length > 3) {
                for (int i = 3; i < secure.length; i++) session.execute(secure[i]);
                ran = ", ran " + (secure.length - 3) + " statement(s)";
            }
            return "cassandra ready: release " + row.getString(0)
                    + (secure != null ? " (TLS, as " + secure[1] + ")" : "") + ran;
        }
    }

    // An SSL context that trusts the certificates of a PEM file, and nothing else.
    static SSLContext trusting(String caPem) throws Exception {
        var trust = KeyStore.getInstance(KeyStore.getDefaultType());
        trust.load(null, null);
        try (var in = new FileInputStream(caPem)) {
            int i = 0;
            for (var cert : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                trust.setCertificateEntry("ca" + i++, cert);
            }
        }
        var tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(trust);
        var context = SSLContext.getInstance("TLS");
        context.init(null, tmf.getTrustManagers(), null);
        return context;
    }
}
