// KafkaJS (npm kafkajs 2.2.4) tells the corpus's transactional story: the scenario txn_kafkajs_tansu
// (scen_kafkajs.py). Run with node, kafkajs installed where NODE_PATH points:
//
//     node story.js BOOTSTRAP[,BOOTSTRAP...] TOPIC TRANSACTIONAL_ID [IDEMPOTENT_TOPIC]
//
// A transactional producer (instance 1, idempotent, acks=-1, maxInFlightRequests 1) commits, aborts and
// commits a transaction of 4 records over partitions 0 and 1, one send call each; a second instance with
// the same transactional id begins a transaction (KafkaJS sends InitProducerId then: the takeover);
// instance 1 begins another transaction, sends one record and tries to commit; instance 2 sends 4 records
// and commits; then, when IDEMPOTENT_TOPIC is given, an idempotent producer with no transactional id
// sends 4 records to it. With KAFKAJS_IDEMPOTENT_AT_CONNECT=0 the transactional producers are created
// with idempotent: false: KafkaJS's connect() then sends no InitProducerId of its own (with idempotent:
// true it asks the controller the Metadata answer names for a non-transactional producer id first),
// and the transaction's InitProducerId (with the transactional id) goes to the transaction coordinator
// at the first transaction() as always; the transaction's sends are idempotent either way.
// It prints one JSON object on stdout: the client's version, each producer's configuration, the producer
// id and epoch each instance logged ("Initialized producer id & epoch", at debug level), what every send
// call returned (KafkaJS's RecordMetadata: one per partition, with its base offset), each transaction's
// outcome and every error caught (its name, its protocol error type). KafkaJS's log goes to stderr.
'use strict'
const { Kafka, logLevel } = require('kafkajs')
const { version } = require('kafkajs/package.json')

const RECORDS_PER_TXN = 4
const PARTITIONS_WRITTEN = 2
const STORY = ['commit', 'abort', 'commit']

const report = {
  client: 'kafkajs',
  client_version: version,
  node_version: process.version,
  producers: {},
  transactions: [],
  sends: [],
  errors: [],
}

function kafka(name, bootstrap) {
  const logCreator = () => ({ namespace, level, log }) => {
    const { message, timestamp, logger, ...extra } = log
    if (message === 'Initialized producer id & epoch') {
      report.producers[name].initialized = (report.producers[name].initialized || []).concat([
        { producer_id: Number(extra.producerId), producer_epoch: Number(extra.producerEpoch) },
      ])
    }
    if (level <= (process.env.KAFKAJS_STDERR_LEVEL ? Number(process.env.KAFKAJS_STDERR_LEVEL) : logLevel.INFO)) process.stderr.write(`[kafkajs ${name}] ${namespace}: ${message} ${JSON.stringify(extra)}\n`)
  }
  return new Kafka({ clientId: name, brokers: bootstrap.split(','), logLevel: logLevel.DEBUG, logCreator })
}

function producer(name, bootstrap, config) {
  report.producers[name] = { config }
  return kafka(name, bootstrap).producer(config)
}

function messages(txn, n) {
  return Array.from({ length: n }, (_, i) => ({
    key: `k${txn}-${i}`,
    value: `value ${txn}-${i}`,
    partition: i % PARTITIONS_WRITTEN,
  }))
}

async function send(name, txn, sender, topic, n) {
  const msgs = messages(txn, n)
  const entry = { producer: name, txn, topic, records: msgs.length }
  try {
    entry.metadata = (await sender.send({ topic, acks: -1, messages: msgs })).map((m) => ({
      topic: m.topicName,
      partition: m.partition,
      error_code: m.errorCode,
      base_offset: Number(m.baseOffset),
      records: msgs.filter((x) => x.partition === m.partition).length,
    }))
  } catch (e) {
    entry.error = e.name
    caught(name, `send (txn ${txn})`, e)
    report.sends.push(entry)
    throw e
  }
  report.sends.push(entry)
}

function caught(name, during, e) {
  report.errors.push({
    producer: name,
    during,
    name: e.name,
    type: e.type || null,
    retriable: e.retriable === undefined ? null : e.retriable,
    message: String(e.message),
  })
}

const IDEMPOTENT_AT_CONNECT = process.env.KAFKAJS_IDEMPOTENT_AT_CONNECT !== '0'
const TXN_CONFIG = (tid) => ({ transactionalId: tid, idempotent: IDEMPOTENT_AT_CONNECT, maxInFlightRequests: 1 })

async function story(bootstrap, topic, tid) {
  const first = producer('corpus-kafkajs-1', bootstrap, TXN_CONFIG(tid))
  await first.connect()
  for (let i = 0; i < STORY.length; i++) {
    const txn = await first.transaction()
    await send('corpus-kafkajs-1', i, txn, topic, RECORDS_PER_TXN)
    if (STORY[i] === 'commit') await txn.commit()
    else await txn.abort()
    report.transactions.push({ producer: 'corpus-kafkajs-1', txn: i, outcome: STORY[i], succeeded: true })
  }

  const second = producer('corpus-kafkajs-2', bootstrap, TXN_CONFIG(tid))
  await second.connect()
  const taken = await second.transaction() // InitProducerId: the takeover

  const zombieTxn = STORY.length
  try {
    const txn = await first.transaction()
    await send('corpus-kafkajs-1', zombieTxn, txn, topic, 1)
    await txn.commit()
    report.transactions.push({ producer: 'corpus-kafkajs-1', txn: zombieTxn, outcome: 'commit', succeeded: true })
  } catch (e) {
    caught('corpus-kafkajs-1', 'zombie transaction', e)
    report.transactions.push({ producer: 'corpus-kafkajs-1', txn: zombieTxn, outcome: 'commit', succeeded: false })
  }
  try {
    await first.disconnect()
  } catch (e) {
    caught('corpus-kafkajs-1', 'disconnect', e)
  }

  await send('corpus-kafkajs-2', 9, taken, topic, RECORDS_PER_TXN)
  await taken.commit()
  report.transactions.push({ producer: 'corpus-kafkajs-2', txn: 9, outcome: 'commit', succeeded: true })
  await second.disconnect()
}

async function idempotent(bootstrap, topic) {
  const p = producer('corpus-kafkajs-idempotent', bootstrap, { idempotent: true, maxInFlightRequests: 1 })
  await p.connect()
  await send('corpus-kafkajs-idempotent', 0, p, topic, RECORDS_PER_TXN)
  await p.disconnect()
}

async function main() {
  const [bootstrap, topic, tid, idemTopic] = process.argv.slice(2)
  try {
    await story(bootstrap, topic, tid)
    if (idemTopic) await idempotent(bootstrap, idemTopic)
  } catch (e) {
    report.unexpected = `${e.name}: ${e.message}`
  }
  // A producer whose connect failed keeps its sockets open: exit once the report is out.
  process.stdout.write(JSON.stringify(report) + '\n', () => process.exit(0))
}

main()
