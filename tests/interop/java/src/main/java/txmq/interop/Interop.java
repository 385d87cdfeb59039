package txmq.interop;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientConfigurationBuilder;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;
import org.apache.rocketmq.client.java.impl.producer.SendReceiptImpl;
import org.apache.rocketmq.client.java.message.MessageViewImpl;

/**
 * Drives the official RocketMQ 5 Java client against a broker and prints one line, RESULT {json}.
 * The commands and their JSON match tests/interop/clients/rmq.py (the Python client's driver), so
 * one pytest suite runs every language: produce, transaction, simple, push.
 */
public final class Interop {
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    private Interop() {
    }

    public static void main(String[] argv) {
        Map<String, String> args = parse(argv);
        Object result;
        try {
            switch (argv[0]) {
                case "produce": result = produce(args); break;
                case "transaction": result = transaction(args); break;
                case "simple": result = simple(args); break;
                case "push": result = push(args); break;
                case "fifo-push": result = fifoPush(args); break;
                default: throw new IllegalArgumentException("unknown command " + argv[0]);
            }
        } catch (Throwable t) {
            result = Map.of("fatal", describe(t));
        }
        System.out.println("RESULT " + json(result));
        System.out.flush();
        // the client's schedulers are non-daemon threads: a driver that is done exits
        System.exit(0);
    }

    // --- arguments: a command, then --name value pairs; a name followed by another name is a flag ---

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> args = new HashMap<>();
        for (int i = 1; i < argv.length; i++) {
            String name = argv[i].substring(2);
            if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) {
                args.put(name, argv[++i]);
            } else {
                args.put(name, "true");
            }
        }
        return args;
    }

    private static int intArg(Map<String, String> args, String name, int fallback) {
        return args.containsKey(name) ? Integer.parseInt(args.get(name)) : fallback;
    }

    private static ClientConfiguration config(Map<String, String> args) {
        ClientConfigurationBuilder builder = ClientConfiguration.newBuilder()
            .setEndpoints(args.get("endpoint"))
            .setRequestTimeout(Duration.ofSeconds(5))
            .enableSsl(false);
        // an empty key means none: the client then sends no authorization header at all
        if (!args.getOrDefault("ak", "").isEmpty()) {
            builder.setCredentialProvider(new StaticSessionCredentialsProvider(args.get("ak"), args.getOrDefault("sk", "")));
        }
        return builder.build();
    }

    private static String describe(Throwable t) {
        Throwable cause = t;
        while (cause.getCause() != null && cause != cause.getCause()) {
            cause = cause.getCause();
        }
        return cause.getClass().getSimpleName() + ": " + cause.getMessage();
    }

    private static Message message(Map<String, String> args, String body) {
        MessageBuilder builder = PROVIDER.newMessageBuilder()
            .setTopic(args.get("topic"))
            .setBody(body.getBytes(StandardCharsets.UTF_8))
            .setKeys("k-" + body)
            .addProperty("origin", "interop");
        if (args.containsKey("tag")) {
            builder.setTag(args.get("tag"));
        }
        if (args.containsKey("message-group")) {
            builder.setMessageGroup(args.get("message-group"));
        }
        if (args.containsKey("delay-s")) {
            builder.setDeliveryTimestamp(System.currentTimeMillis() + 1000L * Integer.parseInt(args.get("delay-s")));
        }
        return builder.build();
    }

    private static Map<String, Object> receipt(SendReceipt r) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("message_id", r.getMessageId().toString());
        SendReceiptImpl impl = (SendReceiptImpl) r;
        out.put("transaction_id", impl.getTransactionId());
        out.put("offset", impl.getOffset());
        return out;
    }

    // --- commands -------------------------------------------------------------------------------

    private static Object produce(Map<String, String> args) throws Exception {
        List<Object> sent = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        String prefix = args.getOrDefault("prefix", "m");
        try (Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config(args))
            .setTopics(args.get("topic")).build()) {
            List<CompletableFuture<SendReceipt>> futures = new ArrayList<>();
            for (int i = 0; i < intArg(args, "count", 1); i++) {
                Message m = message(args, prefix + "-" + i);
                try {
                    if (args.containsKey("async")) {
                        futures.add(producer.sendAsync(m));
                    } else {
                        sent.add(receipt(producer.send(m)));
                    }
                } catch (Throwable t) {
                    errors.add(describe(t));
                }
            }
            for (CompletableFuture<SendReceipt> f : futures) {
                try {
                    sent.add(receipt(f.get(30, TimeUnit.SECONDS)));
                } catch (Throwable t) {
                    errors.add(describe(t));
                }
            }
        }
        return Map.of("sent", sent, "errors", errors);
    }

    private static Object transaction(Map<String, String> args) throws Exception {
        String mode = args.get("mode");
        boolean commit = mode.equals("commit") || mode.equals("orphan-commit");
        List<String> checked = Collections.synchronizedList(new ArrayList<>());
        List<Object> sent = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        int count = intArg(args, "count", 1);
        String prefix = args.getOrDefault("prefix", "m");
        try (Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config(args))
            .setTopics(args.get("topic"))
            .setTransactionChecker(view -> {
                checked.add(StandardCharsets.UTF_8.decode(view.getBody()).toString());
                return commit ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
            }).build()) {
            for (int i = 0; i < count; i++) {
                try {
                    Transaction tx = producer.beginTransaction();
                    sent.add(receipt(producer.send(message(args, prefix + "-" + i), tx)));
                    if (mode.equals("commit")) {
                        tx.commit();
                    } else if (mode.equals("rollback")) {
                        tx.rollback();
                    }
                } catch (Throwable t) {
                    errors.add(describe(t));
                }
            }
            if (mode.startsWith("orphan")) {
                long deadline = System.currentTimeMillis() + 1000L * intArg(args, "timeout", 30);
                while (System.currentTimeMillis() < deadline && new java.util.HashSet<>(checked).size() < count) {
                    Thread.sleep(200);
                }
                Thread.sleep(1000); // let the checker's EndTransaction calls land
            }
        }
        List<String> distinct = new ArrayList<>(new java.util.TreeSet<>(checked));
        return Map.of("sent", sent, "checked", distinct, "errors", errors);
    }

    private static Map<String, Object> view(MessageView m) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("body", StandardCharsets.UTF_8.decode(m.getBody()).toString());
        out.put("message_id", m.getMessageId().toString());
        out.put("attempt", m.getDeliveryAttempt());
        out.put("tag", m.getTag().orElse(null));
        out.put("keys", new ArrayList<>(m.getKeys()));
        out.put("properties", new TreeMap<>(m.getProperties()));
        out.put("message_group", m.getMessageGroup().orElse(null));
        out.put("born_host", m.getBornHost());
        out.put("born_timestamp", m.getBornTimestamp());
        out.put("delivery_timestamp", m.getDeliveryTimestamp().orElse(null));
        if (m instanceof MessageViewImpl) {
            MessageViewImpl impl = (MessageViewImpl) m;
            out.put("queue_id", impl.getMessageQueue() == null ? null : impl.getMessageQueue().getQueueId());
            out.put("offset", impl.getOffset());
            out.put("receipt_handle", impl.getReceiptHandle());
            out.put("corrupted", impl.isCorrupted());
        }
        out.put("acked", false);
        return out;
    }

    private static Object simple(Map<String, String> args) throws Exception {
        List<Map<String, Object>> received = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        String behaviour = args.getOrDefault("behaviour", "ack");
        int expect = intArg(args, "expect", 1);
        Duration invisible = Duration.ofSeconds(intArg(args, "invisible", 10));
        Duration changeTo = Duration.ofSeconds(intArg(args, "change-to", 1));
        FilterExpression filter = new FilterExpression(args.getOrDefault("tag", "*"), FilterExpressionType.TAG);
        try (SimpleConsumer consumer = PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(config(args))
            .setConsumerGroup(args.get("group"))
            .setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Map.of(args.get("topic"), filter)).build()) {
            long deadline = System.currentTimeMillis() + 1000L * intArg(args, "timeout", 30);
            while (System.currentTimeMillis() < deadline
                && received.stream().filter(r -> (Boolean) r.get("acked")).count() < expect) {
                List<MessageView> messages;
                try {
                    messages = consumer.receive(32, invisible);
                } catch (Throwable t) {
                    String error = describe(t);
                    if (!error.contains("40401") && !error.toLowerCase().contains("no new message")) {
                        errors.add(error);
                    }
                    continue;
                }
                for (MessageView m : messages) {
                    Map<String, Object> entry = view(m);
                    received.add(entry);
                    boolean first = m.getDeliveryAttempt() == 1;
                    if (behaviour.equals("ack") || (behaviour.equals("nack-once") && !first)
                        || (behaviour.equals("change-invisible") && !first)) {
                        consumer.ack(m);
                        entry.put("acked", true);
                    } else if (behaviour.equals("change-invisible")) {
                        consumer.changeInvisibleDuration(m, changeTo);
                    }
                }
            }
        }
        return Map.of("received", received, "errors", errors);
    }

    private static Object push(Map<String, String> args) throws Exception {
        List<String> bodies = Collections.synchronizedList(new ArrayList<>());
        int expect = intArg(args, "expect", 1);
        FilterExpression filter = new FilterExpression("*", FilterExpressionType.TAG);
        // never closed: close() waits out the consumer's long poll (the broker's 20 s), and every message
        // consumed was acked when its listener returned, so the driver just exits
        PushConsumer consumer = PROVIDER.newPushConsumerBuilder().setClientConfiguration(config(args))
            .setConsumerGroup(args.get("group"))
            .setSubscriptionExpressions(Map.of(args.get("topic"), filter))
            .setMessageListener(m -> {
                bodies.add(StandardCharsets.UTF_8.decode(m.getBody()).toString());
                return ConsumeResult.SUCCESS;
            }).build();
        long deadline = System.currentTimeMillis() + 1000L * intArg(args, "timeout", 30);
        while (System.currentTimeMillis() < deadline && bodies.size() < expect) {
            Thread.sleep(100);
        }
        Thread.sleep(1000L * intArg(args, "linger", 1)); // duplicates would show up here
        synchronized (bodies) {
            return Map.of("bodies", new ArrayList<>(bodies));
        }
    }

    /** A PushConsumer of a FIFO group over --count messages of each of --message-groups; its listener
     *  fails --fail on its first --fail-times consumptions (rmq.py's fifo-push). */
    private static Object fifoPush(Map<String, String> args) throws Exception {
        List<Map<String, Object>> calls = Collections.synchronizedList(new ArrayList<>());
        String fail = args.getOrDefault("fail", "");
        int failTimes = intArg(args, "fail-times", 1);
        int expect = intArg(args, "expect", 1);
        FilterExpression filter = new FilterExpression("*", FilterExpressionType.TAG);
        PushConsumer consumer = PROVIDER.newPushConsumerBuilder().setClientConfiguration(config(args))
            .setConsumerGroup(args.get("group"))
            .setSubscriptionExpressions(Map.of(args.get("topic"), filter))
            .setMessageListener(m -> {
                String body = StandardCharsets.UTF_8.decode(m.getBody()).toString();
                boolean ok;
                synchronized (calls) {
                    long before = calls.stream().filter(c -> body.equals(c.get("body"))).count();
                    ok = !(body.equals(fail) && before < failTimes);
                    Map<String, Object> call = new LinkedHashMap<>();
                    call.put("body", body);
                    call.put("group", m.getMessageGroup().orElse(null));
                    call.put("ok", ok);
                    calls.add(call);
                }
                return ok ? ConsumeResult.SUCCESS : ConsumeResult.FAILURE;
            }).build();
        Map<String, String> send = new HashMap<>(args);
        try (Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config(args))
            .setTopics(args.get("topic")).build()) {
            for (int i = 0; i < intArg(args, "count", 1); i++) {
                for (String group : args.get("message-groups").split(",")) {
                    send.put("message-group", group);
                    producer.send(message(send, group + "-" + i));
                }
            }
        }
        long deadline = System.currentTimeMillis() + 1000L * intArg(args, "timeout", 40);
        while (System.currentTimeMillis() < deadline) {
            synchronized (calls) {
                if (calls.stream().map(c -> c.get("body")).distinct().count() >= expect) {
                    break;
                }
            }
            Thread.sleep(100);
        }
        Thread.sleep(1000L * intArg(args, "linger", 2)); // a forward to the DLQ, or a redelivery, shows up here
        synchronized (calls) {
            return Map.of("calls", new ArrayList<>(calls));
        }
    }

    // --- JSON, enough for maps, lists, strings, numbers, booleans and null ------------------------

    private static String json(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value);
        return out.toString();
    }

    private static void write(StringBuilder out, Object value) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof String) {
            out.append('"');
            for (char c : ((String) value).toCharArray()) {
                if (c == '"' || c == '\\') {
                    out.append('\\').append(c);
                } else if (c < 0x20) {
                    out.append(String.format("\\u%04x", (int) c));
                } else {
                    out.append(c);
                }
            }
            out.append('"');
        } else if (value instanceof Number || value instanceof Boolean) {
            out.append(value);
        } else if (value instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                write(out, String.valueOf(e.getKey()));
                out.append(':');
                write(out, e.getValue());
            }
            out.append('}');
        } else if (value instanceof Iterable) {
            out.append('[');
            boolean first = true;
            for (Object item : (Iterable<?>) value) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                write(out, item);
            }
            out.append(']');
        } else if (value instanceof ByteBuffer) {
            write(out, StandardCharsets.UTF_8.decode((ByteBuffer) value).toString());
        } else {
            write(out, value.toString());
        }
    }
}
