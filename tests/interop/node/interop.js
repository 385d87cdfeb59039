// Drives the official RocketMQ 5 Node.js client against a broker and prints one line, RESULT {json}.
// Its commands and JSON match tests/interop/clients/rmq.py (the Python client's driver), so one
// pytest suite runs every language: produce, transaction, simple, push.
'use strict';

const {
  Producer, SimpleConsumer, PushConsumer, FilterExpression, ConsumeResult,
} = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

// --name value pairs; a name followed by another name is a flag
function parse(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, '');
    if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) {
      args[name] = argv[++i];
    } else {
      args[name] = 'true';
    }
  }
  return args;
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
const quiet = { info() {}, warn() {}, error() {}, debug() {} };

function options(a) {
  const out = { endpoints: a.endpoint, namespace: '', requestTimeout: 5000, logger: quiet };
  // plaintext unless --tls (the client's default); TLS verifies the broker's certificate
  if (a.tls) out.sslEnabled = true;
  // an empty key means none: the client then sends no authorization header at all
  if (a.ak) {
    out.sessionCredentials = { accessKey: a.ak, accessSecret: a.sk || '' };
  }
  return out;
}

function describe(err) {
  return `${err && err.name ? err.name : 'Error'}: ${err && err.message ? err.message : String(err)}`;
}

function message(a, body) {
  const m = { topic: a.topic, body: Buffer.from(body), keys: [ `k-${body}` ], properties: new Map([[ 'origin', 'interop' ]]) };
  if (a.tag !== undefined) m.tag = a.tag;
  if (a['message-group'] !== undefined) m.messageGroup = a['message-group'];
  if (a['delay-s'] !== undefined) m.deliveryTimestamp = new Date(Date.now() + 1000 * Number(a['delay-s']));
  return m;
}

function receipt(r) {
  return { message_id: r.messageId, transaction_id: r.transactionId, offset: Number(r.offset) };
}

function count(a, name, fallback) {
  return a[name] !== undefined ? Number(a[name]) : fallback;
}

async function produce(a) {
  const producer = new Producer({ ...options(a), topics: [ a.topic ] });
  await producer.startup();
  const sent = [];
  const errors = [];
  const prefix = a.prefix || 'm';
  try {
    const pending = [];
    for (let i = 0; i < count(a, 'count', 1); i++) {
      const send = producer.send(message(a, `${prefix}-${i}`));
      if (a.async) {
        pending.push(send.then(r => sent.push(receipt(r)), e => errors.push(describe(e))));
      } else {
        try {
          sent.push(receipt(await send));
        } catch (e) {
          errors.push(describe(e));
        }
      }
    }
    await Promise.all(pending);
  } finally {
    await producer.shutdown();
  }
  return { sent, errors };
}

async function transaction(a) {
  const mode = a.mode;
  const commit = mode === 'commit' || mode === 'orphan-commit';
  const checked = new Set();
  const checker = {
    async check(view) {
      checked.add(view.body.toString());
      return commit ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
    },
  };
  const producer = new Producer({ ...options(a), topics: [ a.topic ], checker });
  await producer.startup();
  const sent = [];
  const errors = [];
  const n = count(a, 'count', 1);
  const prefix = a.prefix || 'm';
  try {
    for (let i = 0; i < n; i++) {
      try {
        const tx = producer.beginTransaction();
        sent.push(receipt(await producer.send(message(a, `${prefix}-${i}`), tx)));
        if (mode === 'commit') await tx.commit();
        else if (mode === 'rollback') await tx.rollback();
      } catch (e) {
        errors.push(describe(e));
      }
    }
    if (mode.startsWith('orphan')) {
      const deadline = Date.now() + 1000 * count(a, 'timeout', 30);
      while (Date.now() < deadline && checked.size < n) await sleep(200);
      await sleep(1000); // let the checker's EndTransaction calls land
    }
  } finally {
    await producer.shutdown();
  }
  return { sent, checked: [ ...checked ].sort(), errors };
}

function view(m) {
  return {
    body: m.body.toString(), message_id: m.messageId, attempt: m.deliveryAttempt,
    tag: m.tag || null, keys: [ ...m.keys ],  // the client reads an absent tag or group as ''
    properties: Object.fromEntries(m.properties || new Map()),
    message_group: m.messageGroup || null,
    born_host: m.bornHost, born_timestamp: m.bornTimestamp ? m.bornTimestamp.getTime() : null,
    delivery_timestamp: m.deliveryTimestamp ? m.deliveryTimestamp.getTime() : null,
    offset: m.offset === undefined ? null : Number(m.offset), receipt_handle: m.receiptHandle,
    corrupted: m.corrupted, acked: false,
  };
}

async function simple(a) {
  const filter = new FilterExpression(a.tag || '*');
  const consumer = new SimpleConsumer({
    ...options(a), consumerGroup: a.group, awaitDuration: 1000 * count(a, 'await-s', 2),
    subscriptions: new Map([[ a.topic, filter ]]),
  });
  await consumer.startup();
  const received = [];
  const errors = [];
  const behaviour = a.behaviour || 'ack';
  const expect = count(a, 'expect', 1);
  const invisible = 1000 * count(a, 'invisible', 10);
  const changeTo = 1000 * count(a, 'change-to', 1);
  const batch = count(a, 'batch', 32);
  const batches = [];
  let acked = 0;
  try {
    const deadline = Date.now() + 1000 * count(a, 'timeout', 30);
    while (Date.now() < deadline && acked < expect) {
      let messages;
      try {
        messages = await consumer.receive(batch, invisible);
      } catch (e) {
        const text = describe(e);
        if (!text.includes('40401') && !text.toLowerCase().includes('no new message')) errors.push(text);
        continue;
      }
      batches.push(messages.length);
      for (const m of messages) {
        const entry = view(m);
        received.push(entry);
        if (behaviour === 'ack-after-expiry') {
          // the invisible time passes: ack and change-invisible must then be refused
          await sleep(invisible + 1000);
          try {
            await consumer.ack(m);
            entry.acked = true;
          } catch (e) {
            entry.ack_error = describe(e);
          }
          try {
            await consumer.changeInvisibleDuration(m, changeTo);
          } catch (e) {
            entry.change_error = describe(e);
          }
          return { received, errors, batches };
        }
        // nack-once and change-invisible ack a message on its second delivery
        if (behaviour === 'ack' || m.deliveryAttempt > 1) {
          await consumer.ack(m);
          entry.acked = true;
          acked++;
        } else if (behaviour === 'change-invisible') {
          await consumer.changeInvisibleDuration(m, changeTo);
        }
      }
    }
  } finally {
    await consumer.shutdown();
  }
  return { received, errors, batches };
}

async function push(a) {
  const bodies = [];
  const consumer = new PushConsumer({
    ...options(a), consumerGroup: a.group, subscriptions: new Map([[ a.topic, FilterExpression.SUB_ALL ]]),
    messageListener: {
      consume(m) {
        bodies.push(m.body.toString());
        return ConsumeResult.SUCCESS;
      },
    },
  });
  await consumer.startup();
  const deadline = Date.now() + 1000 * count(a, 'timeout', 30);
  while (Date.now() < deadline && bodies.length < count(a, 'expect', 1)) await sleep(100);
  await sleep(1000 * count(a, 'linger', 1)); // duplicates would show up here
  // no shutdown: it waits out the consumer's long poll; every message consumed was acked already
  return { bodies: [ ...bodies ] };
}

async function main() {
  const commands = { produce, transaction, simple, push };
  const a = parse(process.argv.slice(3));
  let result;
  try {
    const fn = commands[process.argv[2]];
    if (!fn) throw new Error(`unknown command ${process.argv[2]}`);
    result = await fn(a);
  } catch (e) {
    result = { fatal: describe(e) };
  }
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`, () => process.exit(0));
}

main();
