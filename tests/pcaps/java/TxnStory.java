// Apache Kafka's own Java client (kafka-clients) tells the corpus's transactional story: the scenario
// txn_java_tansu (scen_java.py). Run with the Java 17 source launcher:
//
//     java -cp 'JARS/*' TxnStory.java BOOTSTRAP TOPIC TRANSACTIONAL_ID IDEMPOTENT_TOPIC
//
// A transactional producer (instance 1) commits, aborts (after flushing, so the aborted records reach
// the broker) and commits a transaction of 4 records over partitions 0 and 1; a second instance with the
// same transactional id calls initTransactions (the takeover); instance 1 begins another transaction,
// sends one record and tries to commit; instance 2 commits one transaction; then an idempotent producer
// with no transactional id writes 4 records. It prints one JSON object on stdout: the client's version,
// each producer's configuration, the producer id and epoch each instance held (read by reflection from the
// client's TransactionManager: not public API), every send's RecordMetadata (topic, partition, offset) or
// exception class, each transaction's outcome, and every exception caught, by class name. The client's
// own log goes nowhere (no SLF4J binding on the class path).
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.AppInfoParser;

public class TxnStory {
    static final int RECORDS_PER_TXN = 4;
    static final int PARTITIONS_WRITTEN = 2;
    static final String[] STORY = {"commit", "abort", "commit"};

    static final List<Object> sends = new ArrayList<>();
    static final List<Object> transactions = new ArrayList<>();
    static final List<Object> exceptions = new ArrayList<>();
    static final Map<String, Object> producers = new LinkedHashMap<>();

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], tid = args[2], idemTopic = args[3];
        Map<String, Object> report = new LinkedHashMap<>();
        report.put("client", "kafka-clients");
        report.put("client_version", AppInfoParser.getVersion());
        report.put("java_version", System.getProperty("java.version"));
        report.put("producers", producers);
        report.put("transactions", transactions);
        report.put("sends", sends);
        report.put("exceptions", exceptions);
        try {
            story(bootstrap, topic, tid);
            idempotent(bootstrap, idemTopic);
        } catch (Exception e) {
            report.put("unexpected", e.getClass().getName() + ": " + e.getMessage());
        }
        System.out.println(json(report));
    }

    static KafkaProducer<String, String> producer(String name, String bootstrap, String tid) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, name);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "15000");
        if (tid != null) p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
        Map<String, Object> config = new LinkedHashMap<>();
        for (String k : p.stringPropertyNames()) config.put(k, p.getProperty(k));
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("config", new java.util.TreeMap<>(config));
        producers.put(name, entry);
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    @SuppressWarnings("unchecked")
    static void noteIdentity(String name, KafkaProducer<?, ?> producer, String when) {
        Map<String, Object> entry = (Map<String, Object>) producers.get(name);
        try {
            Field f = KafkaProducer.class.getDeclaredField("transactionManager");
            f.setAccessible(true);
            Object tm = f.get(producer);
            Method m = tm.getClass().getDeclaredMethod("producerIdAndEpoch");
            m.setAccessible(true);
            Object pe = m.invoke(tm);
            long pid = pe.getClass().getField("producerId").getLong(pe);
            short epoch = pe.getClass().getField("epoch").getShort(pe);
            Map<String, Object> id = new LinkedHashMap<>();
            id.put("producer_id", pid);
            id.put("producer_epoch", (int) epoch);
            entry.put(when, id);
        } catch (ReflectiveOperationException | RuntimeException e) {
            entry.put(when, "unreadable: " + e.getClass().getName());
        }
    }

    static void caught(String producer, String during, Throwable e) {
        Map<String, Object> ex = new LinkedHashMap<>();
        ex.put("producer", producer);
        ex.put("during", during);
        ex.put("class", e.getClass().getName());
        ex.put("message", String.valueOf(e.getMessage()));
        if (e.getCause() != null) ex.put("cause", e.getCause().getClass().getName());
        exceptions.add(ex);
    }

    static List<Future<RecordMetadata>> sendAll(KafkaProducer<String, String> p, String topic, int txn, int n) {
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            futures.add(p.send(new ProducerRecord<>(topic, i % PARTITIONS_WRITTEN, "k" + txn + "-" + i, "value " + txn + "-" + i)));
        }
        return futures;
    }

    /** Each send's RecordMetadata or exception, once the producer has flushed. */
    static int settle(String producer, int txn, List<Future<RecordMetadata>> futures) {
        int acked = 0;
        for (Future<RecordMetadata> f : futures) {
            Map<String, Object> s = new LinkedHashMap<>();
            s.put("producer", producer);
            s.put("txn", txn);
            try {
                RecordMetadata md = f.get();
                s.put("topic", md.topic());
                s.put("partition", md.partition());
                s.put("offset", md.offset());
                acked++;
            } catch (ExecutionException e) {
                s.put("exception", e.getCause().getClass().getName());
                caught(producer, "send (txn " + txn + ")", e.getCause());
            } catch (InterruptedException e) {
                s.put("exception", e.getClass().getName());
            }
            sends.add(s);
        }
        return acked;
    }

    static void txn(String producer, int index, String outcome, boolean succeeded) {
        Map<String, Object> t = new LinkedHashMap<>();
        t.put("producer", producer);
        t.put("txn", index);
        t.put("outcome", outcome);
        t.put("succeeded", succeeded);
        transactions.add(t);
    }

    static void story(String bootstrap, String topic, String tid) {
        KafkaProducer<String, String> first = producer("corpus-java-1", bootstrap, tid);
        first.initTransactions();
        noteIdentity("corpus-java-1", first, "after_init");
        for (int i = 0; i < STORY.length; i++) {
            first.beginTransaction();
            List<Future<RecordMetadata>> futures = sendAll(first, topic, i, RECORDS_PER_TXN);
            first.flush(); // the records reach the broker before the transaction ends
            settle("corpus-java-1", i, futures);
            if (STORY[i].equals("commit")) first.commitTransaction();
            else first.abortTransaction();
            txn("corpus-java-1", i, STORY[i], true);
        }

        KafkaProducer<String, String> second = producer("corpus-java-2", bootstrap, tid);
        second.initTransactions(); // the takeover: the coordinator fences instance 1
        noteIdentity("corpus-java-2", second, "after_init");

        // The zombie: instance 1 goes on as if nothing happened.
        int zombieTxn = STORY.length;
        try {
            first.beginTransaction();
            List<Future<RecordMetadata>> futures = sendAll(first, topic, zombieTxn, 1);
            first.flush();
            settle("corpus-java-1", zombieTxn, futures);
            first.commitTransaction();
            txn("corpus-java-1", zombieTxn, "commit", true);
        } catch (RuntimeException e) {
            caught("corpus-java-1", "zombie transaction", e);
            txn("corpus-java-1", zombieTxn, "commit", false);
        }
        noteIdentity("corpus-java-1", first, "after_zombie");
        try {
            first.close(java.time.Duration.ofSeconds(2));
        } catch (RuntimeException e) {
            caught("corpus-java-1", "close", e);
        }

        second.beginTransaction();
        List<Future<RecordMetadata>> futures = sendAll(second, topic, 9, RECORDS_PER_TXN);
        second.flush();
        settle("corpus-java-2", 9, futures);
        second.commitTransaction();
        txn("corpus-java-2", 9, "commit", true);
        second.close(java.time.Duration.ofSeconds(5));
    }

    static void idempotent(String bootstrap, String topic) {
        KafkaProducer<String, String> p = producer("corpus-java-idempotent", bootstrap, null);
        List<Future<RecordMetadata>> futures = sendAll(p, topic, 0, RECORDS_PER_TXN);
        p.flush();
        settle("corpus-java-idempotent", 0, futures);
        noteIdentity("corpus-java-idempotent", p, "after_sends");
        p.close(java.time.Duration.ofSeconds(5));
    }

    // A little JSON writer: maps, lists, strings, numbers, booleans, null.
    static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof Map<?, ?> m) {
            StringBuilder b = new StringBuilder("{");
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (b.length() > 1) b.append(", ");
                b.append(json(String.valueOf(e.getKey()))).append(": ").append(json(e.getValue()));
            }
            return b.append("}").toString();
        }
        if (o instanceof List<?> l) {
            StringBuilder b = new StringBuilder("[");
            for (Object v : l) {
                if (b.length() > 1) b.append(", ");
                b.append(json(v));
            }
            return b.append("]").toString();
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : o.toString().toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append("\"").toString();
    }
}
