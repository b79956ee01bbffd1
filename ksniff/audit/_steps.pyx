# cython: language_level=3
"""Steps of the audit's fold in C, each on the same objects as its Python function, which is the reference
it is held to and what runs for anything of other classes than those it checks (the fold's own modules
take these in place of their functions when this module is built: `partlog._on_produce`,
`identity.see_producer`, `produce.on_produce`).

`Placing.on_produce`, `partlog._on_produce`: each acknowledged batch of a Produce exchange placed in its
partition's log, with the same steps in the same order (the log found or made, its counters, the placed
batch and its acknowledgement records made, the batch at its offset, the producer's row on the partition,
the batch by its sequence, the acknowledged offsets, the open transaction's writes). The batches, their
headers, the exchange, the logs, the placed batches and the producers' rows are read and written through
their slots (their exact classes checked first); the dicts, sets and lists they hold through their own C
calls. What is rare stays Python's: a write the broker refused for an older epoch (the log found by
`LogState.log`), a placed batch a Fetch answer had returned first (`_lost`, and the batch's
acknowledgement set on it), a log past its cap (`forget_oldest`), an offset before the last acknowledged
one (`bisect.insort`). Anything of another class than those checked, and the whole exchange is the Python
function's.

`Seeing.see_producer`, `identity.see_producer`: a producer id seen at an epoch on an exchange's
connection (its epochs, clients, client ids, connections; its transactional id's connections).

`Producing.on_produce`, `produce.on_produce`: each batch of a Produce exchange judged (identity, sequence,
transaction), its usual outcomes in C and the rest by the Python functions the reference calls.

The corpus audits give the same documents and tables with these and without them
(tests/audit/test_compiled_fold.py, tests/audit/test_steps.py).
"""

import bisect

from ksniff.common._slotdesc cimport slot_get as _get, slot_offset, slot_put as _put


cdef class Placing:
    """`on_produce(st, ex, out, ctx)`: `partlog._on_produce`, for the classes given."""

    cdef type state_cls, ex_cls, batch_cls, header_cls, log_cls, placed_cls, owner_cls
    cdef object python, fencing, placed, acked_batch, acked_exchange, txn_write, owner, new_log, module
    # LogState
    cdef Py_ssize_t st_txn_ids, st_split, st_txn_writes, st_names, st_logs
    # Exchange
    cdef Py_ssize_t x_batches, x_response_ts, x_request_ts, x_conn, x_client, x_broker, x_api_name
    cdef Py_ssize_t x_api_version, x_correlation_id, x_client_id, x_response, x_unverified
    # ProducedBatch
    cdef Py_ssize_t b_header, b_tid, b_code, b_partition, b_topic, b_base, b_acks, b_ts, b_response_ts
    cdef Py_ssize_t b_client, b_unverified
    # RecordBatchHeader
    cdef Py_ssize_t h_crc_ok, h_pid, h_epoch, h_control, h_delta, h_sequence, h_transactional
    # PartitionLog
    cdef Py_ssize_t l_acked_batches, l_acked_records, l_at, l_end, l_by_sequence, l_acked_bases
    cdef Py_ssize_t l_open_txn, l_producers
    # Placed
    cdef Py_ssize_t p_fetched_ts, p_outcome, p_acked, p_acked_ex, p_tid
    # ProducerOnPartition
    cdef Py_ssize_t o_tid, o_epochs, o_batches, o_records, o_first_offset, o_last_offset
    cdef Py_ssize_t o_first_sequence, o_last_sequence

    def __init__(self, python, dict classes, dict makers, fencing, module):
        """`classes`: LogState, Exchange, ProducedBatch, RecordBatchHeader, PartitionLog, Placed and
        ProducerOnPartition by those names; `makers`: the placed batch's, its acknowledgement records'
        and the transactional write's (by position) and the producer's row (by its id); `module`: where
        the cap on each log (MAX_BATCHES) is read, at each exchange, as the Python function reads it.
        TypeError when a field read here is not a slot of its class (the Python function then runs)."""
        self.python, self.fencing, self.module = python, fencing, module
        st = self.state_cls = classes["LogState"]
        ex = self.ex_cls = classes["Exchange"]
        b = self.batch_cls = classes["ProducedBatch"]
        h = self.header_cls = classes["RecordBatchHeader"]
        lg = self.log_cls = classes["PartitionLog"]
        p = self.placed_cls = classes["Placed"]
        o = self.owner_cls = classes["ProducerOnPartition"]
        self.placed, self.acked_batch = makers["Placed"], makers["AckedBatch"]
        self.acked_exchange, self.txn_write = makers["AckedExchange"], makers["TxnWrite"]
        self.owner, self.new_log = makers["ProducerOnPartition"], makers["PartitionLog"]
        self.st_txn_ids, self.st_split = slot_offset(st, "txn_ids"), slot_offset(st, "split")
        self.st_txn_writes, self.st_names = slot_offset(st, "txn_writes"), slot_offset(st, "names")
        self.st_logs = slot_offset(st, "logs")
        self.x_batches, self.x_conn = slot_offset(ex, "batches"), slot_offset(ex, "conn")
        self.x_response_ts, self.x_request_ts = slot_offset(ex, "response_ts"), slot_offset(ex, "request_ts")
        self.x_client, self.x_broker = slot_offset(ex, "client"), slot_offset(ex, "broker")
        self.x_api_name, self.x_api_version = slot_offset(ex, "api_name"), slot_offset(ex, "api_version")
        self.x_correlation_id, self.x_client_id = slot_offset(ex, "correlation_id"), slot_offset(ex, "client_id")
        self.x_response, self.x_unverified = slot_offset(ex, "response"), slot_offset(ex, "unverified")
        self.b_header, self.b_tid = slot_offset(b, "header"), slot_offset(b, "transactional_id")
        self.b_code, self.b_partition = slot_offset(b, "error_code"), slot_offset(b, "partition")
        self.b_topic, self.b_base = slot_offset(b, "topic"), slot_offset(b, "base_offset")
        self.b_acks, self.b_ts, self.b_client = slot_offset(b, "acks"), slot_offset(b, "ts"), slot_offset(b, "client")
        self.b_response_ts, self.b_unverified = slot_offset(b, "response_ts"), slot_offset(b, "unverified")
        self.h_crc_ok, self.h_pid = slot_offset(h, "crc_ok"), slot_offset(h, "producer_id")
        self.h_epoch, self.h_control = slot_offset(h, "producer_epoch"), slot_offset(h, "control")
        self.h_delta, self.h_sequence = slot_offset(h, "last_offset_delta"), slot_offset(h, "base_sequence")
        self.h_transactional = slot_offset(h, "transactional")
        self.l_acked_batches, self.l_acked_records = slot_offset(lg, "acked_batches"), slot_offset(lg, "acked_records")
        self.l_at, self.l_end = slot_offset(lg, "at"), slot_offset(lg, "end")
        self.l_by_sequence, self.l_acked_bases = slot_offset(lg, "by_sequence"), slot_offset(lg, "acked_bases")
        self.l_open_txn, self.l_producers = slot_offset(lg, "open_txn"), slot_offset(lg, "producers")
        self.p_fetched_ts, self.p_outcome = slot_offset(p, "fetched_ts"), slot_offset(p, "outcome")
        self.p_acked, self.p_acked_ex = slot_offset(p, "acked"), slot_offset(p, "acked_ex")
        self.p_tid = slot_offset(p, "transactional_id")
        self.o_tid, self.o_epochs = slot_offset(o, "transactional_id"), slot_offset(o, "epochs")
        self.o_batches, self.o_records = slot_offset(o, "batches"), slot_offset(o, "records")
        self.o_first_offset, self.o_last_offset = slot_offset(o, "first_offset"), slot_offset(o, "last_offset")
        self.o_first_sequence = slot_offset(o, "first_sequence")
        self.o_last_sequence = slot_offset(o, "last_sequence")

    def on_produce(self, st, ex, list out, ctx):
        cdef dict txn_ids, txn_writes, names, logs, at, by_sequence
        cdef list bases
        cdef Py_ssize_t max_batches
        if type(st) is not self.state_cls or type(ex) is not self.ex_cls:
            return self.python(st, ex, out, ctx)
        batches = _get(ex, self.x_batches)
        if type(batches) is not tuple:
            return self.python(st, ex, out, ctx)
        for b in <tuple> batches:  # every batch and header of the classes read here, before any change
            if type(b) is not self.batch_cls or type(_get(b, self.b_header)) is not self.header_cls:
                return self.python(st, ex, out, ctx)
        max_batches = self.module.MAX_BATCHES
        txn_ids = _get(st, self.st_txn_ids)
        txn_writes = _get(st, self.st_txn_writes)
        names = _get(st, self.st_names)
        logs = _get(st, self.st_logs)
        split = _get(st, self.st_split)
        head = None  # the exchange as placed batches keep it, made for its first acknowledged batch
        for b in <tuple> batches:
            h = _get(b, self.b_header)
            if _get(h, self.h_crc_ok) is False:
                continue
            pid = _get(h, self.h_pid)
            tid = _get(b, self.b_tid)
            code = _get(b, self.b_code)
            partition = _get(b, self.b_partition)
            if tid and pid >= 0:
                txn_ids[pid] = tid
            if split is not None and partition % split[0] != split[1]:
                continue  # another fold's partition: only its producer's transactional id is learnt
            if tid and pid >= 0:
                if code in self.fencing:  # kept to tell a late write an epoch bump refused
                    txn_writes.setdefault((pid, _get(h, self.h_epoch)), []).append(
                        self.txn_write(
                            st.log(_get(b, self.b_topic), partition),
                            None,
                            _get(ex, self.x_response_ts),
                            _get(ex, self.x_request_ts),
                            ex,
                            b,
                        )
                    )
            base = _get(b, self.b_base)
            acks = _get(b, self.b_acks)
            if base is None or code != 0 or acks == 0 or _get(h, self.h_control):
                continue
            topic = _get(b, self.b_topic)
            if names:
                topic = names.get(topic, topic)
            key = (topic, partition)
            lg = logs.get(key)
            if lg is None:
                lg = logs[key] = self.new_log(topic, partition)
            if type(lg) is not self.log_cls:  # never: `logs` holds the logs made here and by `LogState.log`
                raise TypeError(f"a partition log of {type(lg).__name__}")
            delta = _get(h, self.h_delta)
            _put(lg, self.l_acked_batches, _get(lg, self.l_acked_batches) + 1)
            _put(lg, self.l_acked_records, _get(lg, self.l_acked_records) + (delta + 1))
            at = _get(lg, self.l_at)
            old = at.get(base)
            if head is None:
                head = self.acked_exchange(
                    _get(ex, self.x_conn),
                    _get(ex, self.x_client),
                    _get(ex, self.x_broker),
                    _get(ex, self.x_api_name),
                    _get(ex, self.x_api_version),
                    _get(ex, self.x_correlation_id),
                    _get(ex, self.x_client_id),
                    True if _get(ex, self.x_response) is not None else None,
                    _get(ex, self.x_request_ts),
                    _get(ex, self.x_unverified),
                )
            acked = self.acked_batch(
                _get(b, self.b_ts), _get(b, self.b_response_ts), _get(b, self.b_client), acks,
                _get(b, self.b_unverified),
            )
            epoch = _get(h, self.h_epoch)
            sequence = _get(h, self.h_sequence)
            last = base + delta
            p = self.placed(
                base, last, pid, epoch, sequence, _get(h, self.h_transactional), None, tid, acked, head,
                None, None, None, None, None,
            )
            if old is not None and old.fetched_ts is not None:  # returned by a Fetch answer first: rare
                if not old.same(h):
                    self._lost(lg, p, old, ex, out, ctx)
                old.acked, old.acked_ex, old.transactional_id = acked, head, tid
                p = old
            else:
                at[base] = p
                if len(at) > max_batches:
                    lg.forget_oldest()
                if last + 1 > _get(lg, self.l_end):
                    _put(lg, self.l_end, last + 1)
                if pid >= 0:
                    self._producer(lg, p, pid, tid, epoch, base, last, sequence)
                    if sequence >= 0:
                        by_sequence = _get(lg, self.l_by_sequence)
                        by_sequence.setdefault((pid, epoch, sequence, delta), base)
                        if len(by_sequence) > max_batches:  # bounded as the fetched batches' entries
                            del by_sequence[next(iter(by_sequence))]
            bases = _get(lg, self.l_acked_bases)
            if not bases or base > bases[-1]:
                bases.append(base)  # bisect.insort, where an offset past the last goes
            else:
                bisect.insort(bases, base)
            if _get(h, self.h_transactional) and pid >= 0:
                if old is None and _get(p, self.p_outcome) is None:  # p: the batch just made
                    (<dict?> _get(lg, self.l_open_txn)).setdefault(pid, []).append(base)
                txn_writes.setdefault((pid, epoch), []).append(
                    self.txn_write(lg, base, _get(ex, self.x_response_ts), _get(ex, self.x_request_ts), ex, b)
                )

    cdef _lost(self, lg, p, old, ex, list out, ctx):
        from ksniff.audit.partlog import _lost

        _lost(lg, p, old, ex, out, ctx)

    cdef _producer(self, lg, p, pid, tid, epoch, base, last, sequence):
        """`PartitionLog.producer(p)` of the batch `p` just placed (not a marker: `control` is None)."""
        cdef dict producers = _get(lg, self.l_producers)
        s = producers.get(pid)
        if s is not None and type(s) is not self.owner_cls:
            lg.producer(p)  # never: `producers` holds the rows made below
            return
        if s is None:
            s = producers[pid] = self.owner(pid)
        if not _get(s, self.o_tid):
            _put(s, self.o_tid, tid)
        (<set?> _get(s, self.o_epochs)).add(epoch)
        _put(s, self.o_batches, _get(s, self.o_batches) + 1)
        _put(s, self.o_records, _get(s, self.o_records) + (last - base + 1))
        first = _get(s, self.o_first_offset)
        if first is None or base < first:
            _put(s, self.o_first_offset, base)
        final = _get(s, self.o_last_offset)
        if final is None or last > final:
            _put(s, self.o_last_offset, last)
        if sequence >= 0:
            last_seq = sequence + last - base
            first = _get(s, self.o_first_sequence)
            if first is None or sequence < first:
                _put(s, self.o_first_sequence, sequence)
            final = _get(s, self.o_last_sequence)
            if final is None or last_seq > final:
                _put(s, self.o_last_sequence, last_seq)


cdef class Seeing:
    """`see_producer(state, producer_id, epoch, ex, transactional_id)`: `identity.see_producer`."""

    cdef type state_cls, ex_cls, producer_cls, txn_cls
    cdef object python
    cdef Py_ssize_t s_producers, s_txn_ids, x_request_ts, x_client, x_client_id, x_conn
    cdef Py_ssize_t p_epochs, p_top_epoch, p_started_epochs, p_clients, p_client_ids, p_conns, p_tid, t_conns

    def __init__(self, python, dict classes):
        """`classes`: AuditState, Exchange, ProducerState and TxnIdState by those names. TypeError when a
        field read here is not a slot of its class (the Python function then runs)."""
        self.python = python
        st = self.state_cls = classes["AuditState"]
        ex = self.ex_cls = classes["Exchange"]
        p = self.producer_cls = classes["ProducerState"]
        t = self.txn_cls = classes["TxnIdState"]
        self.s_producers, self.s_txn_ids = slot_offset(st, "producers"), slot_offset(st, "txn_ids")
        self.x_request_ts, self.x_client = slot_offset(ex, "request_ts"), slot_offset(ex, "client")
        self.x_client_id, self.x_conn = slot_offset(ex, "client_id"), slot_offset(ex, "conn")
        self.p_epochs, self.p_top_epoch = slot_offset(p, "epochs"), slot_offset(p, "top_epoch")
        self.p_started_epochs, self.p_clients = slot_offset(p, "started_epochs"), slot_offset(p, "clients")
        self.p_client_ids, self.p_conns = slot_offset(p, "client_ids"), slot_offset(p, "conns")
        self.p_tid = slot_offset(p, "transactional_id")
        self.t_conns = slot_offset(t, "conns")

    def see_producer(self, state, producer_id, epoch, ex, transactional_id):
        cdef set epochs
        if type(state) is not self.state_cls or type(ex) is not self.ex_cls:
            return self.python(state, producer_id, epoch, ex, transactional_id)
        p = (<dict?> _get(state, self.s_producers)).get(producer_id)  # state.producer(), inline
        if p is None:
            p = state.producer(producer_id, _get(ex, self.x_request_ts))
        if type(p) is not self.producer_cls:  # never: `producers` holds the ProducerStates it makes
            return self.python(state, producer_id, epoch, ex, transactional_id)
        epochs = _get(p, self.p_epochs)
        if epoch >= 0 and epoch not in epochs:  # the usual case, an epoch already seen, changes nothing
            if epochs and epoch > _get(p, self.p_top_epoch):
                (<set?> _get(p, self.p_started_epochs)).add(epoch)  # bumped in front of us
            epochs.add(epoch)
            if epoch > _get(p, self.p_top_epoch):
                _put(p, self.p_top_epoch, epoch)
        (<set?> _get(p, self.p_clients)).add(_get(ex, self.x_client))
        client_id = _get(ex, self.x_client_id)
        if client_id:
            (<set?> _get(p, self.p_client_ids)).add(client_id)
        conn = _get(ex, self.x_conn)
        (<set?> _get(p, self.p_conns)).add(conn)
        if transactional_id is not None:
            _put(p, self.p_tid, transactional_id)
            t = (<dict?> _get(state, self.s_txn_ids)).get(transactional_id)
            if t is None:
                t = state.txn_id(transactional_id, _get(ex, self.x_request_ts))
            if type(t) is self.txn_cls:
                (<set?> _get(t, self.t_conns)).add(conn)
            else:  # never: `txn_ids` holds the TxnIdStates it makes
                t.conns.add(conn)
        return p


cdef class Producing:
    """`on_produce(state, ex, out)`: `produce.on_produce`, for the classes given.

    Every batch goes through the same checks in the same order as the Python function's. The usual
    outcomes are read here: a batch of the instance that holds its transactional id (`is_superseded`
    inline), a sequence in order (`produce._sequence`, then `_advance`), and a write into the ongoing
    transaction that registered its partition or needs no registration (`transactions.write`'s usual
    case). What is rare or has something to report is the Python functions' own, looked up in `produce`'s
    namespace where that function looks them up: an epoch gone back (`identity.epoch_regression`), a
    zombie (`identity.zombie`, `write` into its lane), a newer instance adopted (`identity.adopt`,
    `new_instance`), a fencing answer (`identity.fenced_by_broker`), any other write (`write`), and any
    batch out of order (`produce._sequence`, called before anything of the batch was changed here).
    `identity.see_producer` is called as that function calls it."""

    cdef type state_cls, ex_cls, batch_cls, header_cls, producer_cls, txn_cls, instance_cls, seq_cls
    cdef type record_cls
    cdef object python, produce, fencing, duplicate, accepted, seq_mod, ongoing
    cdef bint writes  # a write can go on in an ongoing transaction, by the table (ksniff.audit.txn)
    # AuditState
    cdef Py_ssize_t s_producers, s_txn_ids, s_sequences, s_keys
    # Exchange
    cdef Py_ssize_t x_request, x_batches, x_unverified, x_request_ts, x_response_ts, x_conn, x_api_version
    # ProducedBatch
    cdef Py_ssize_t b_header, b_code, b_unverified, b_acks, b_topic, b_partition, b_base
    # RecordBatchHeader
    cdef Py_ssize_t h_crc_ok, h_pid, h_epoch, h_control, h_records, h_sequence, h_transactional
    # ProducerState
    cdef Py_ssize_t p_top_epoch, p_started_epochs, p_batches, p_records
    # TxnIdState, Instance
    cdef Py_ssize_t t_superseded, t_fenced_upto, t_current, t_tv2, t_state, t_txn, i_pid, i_epoch
    # TxnRecord
    cdef Py_ssize_t r_outcome, r_intent, r_taken_over_ts, r_known, r_registered, r_partitions, r_records
    cdef Py_ssize_t r_batches
    # PartitionSeq
    cdef Py_ssize_t q_epoch, q_next, q_last_ts, q_recent, q_order, q_unanswered

    def __init__(self, python, dict classes, accepted, produce, fencing, duplicate, table):
        """`classes`: AuditState, Exchange, ProducedBatch, RecordBatchHeader, ProducerState, Lane,
        TxnIdState, TxnRecord, Instance and PartitionSeq by those names; `accepted`: the maker of an
        accepted batch's record (by position); `produce`: the module whose namespace the Python function
        reads (its helpers, and RECENT_BATCHES at each exchange); `fencing`: the fencing error codes;
        `duplicate`: DUPLICATE_SEQUENCE_NUMBER; `table`: the transaction table's ALLOWED, ONGOING, WRITE
        and WRITE_TV2. TypeError when a field read here is not a slot of its class."""
        self.python, self.produce, self.accepted = python, produce, accepted
        allowed, self.ongoing, plain, tv2 = table
        ongoing = allowed[self.ongoing]
        self.writes = ongoing.get(plain) is not None and ongoing.get(tv2) is not None
        self.fencing, self.duplicate, self.seq_mod = fencing, duplicate, produce.SEQ_MOD
        st = self.state_cls = classes["AuditState"]
        ex = self.ex_cls = classes["Exchange"]
        b = self.batch_cls = classes["ProducedBatch"]
        h = self.header_cls = classes["RecordBatchHeader"]
        p = self.producer_cls = classes["ProducerState"]
        t = self.txn_cls = classes["TxnIdState"]
        i = self.instance_cls = classes["Instance"]
        q = self.seq_cls = classes["PartitionSeq"]
        self.s_producers, self.s_txn_ids = slot_offset(st, "producers"), slot_offset(st, "txn_ids")
        self.s_sequences, self.s_keys = slot_offset(st, "sequences"), slot_offset(st, "keys")
        self.x_request, self.x_batches = slot_offset(ex, "request"), slot_offset(ex, "batches")
        self.x_unverified, self.x_request_ts = slot_offset(ex, "unverified"), slot_offset(ex, "request_ts")
        self.x_response_ts, self.x_conn = slot_offset(ex, "response_ts"), slot_offset(ex, "conn")
        self.b_header, self.b_code = slot_offset(b, "header"), slot_offset(b, "error_code")
        self.b_unverified, self.b_acks = slot_offset(b, "unverified"), slot_offset(b, "acks")
        self.b_topic, self.b_partition = slot_offset(b, "topic"), slot_offset(b, "partition")
        self.b_base = slot_offset(b, "base_offset")
        self.h_crc_ok, self.h_pid = slot_offset(h, "crc_ok"), slot_offset(h, "producer_id")
        self.h_epoch, self.h_control = slot_offset(h, "producer_epoch"), slot_offset(h, "control")
        self.h_records, self.h_sequence = slot_offset(h, "records_count"), slot_offset(h, "base_sequence")
        self.h_transactional = slot_offset(h, "transactional")
        self.p_top_epoch = slot_offset(p, "top_epoch")
        self.p_started_epochs = slot_offset(p, "started_epochs")
        self.p_batches, self.p_records = slot_offset(p, "batches"), slot_offset(p, "records")
        self.t_superseded = slot_offset(t, "superseded_pids")
        self.t_fenced_upto = slot_offset(t, "fenced_upto")
        self.t_current, self.t_tv2 = slot_offset(t, "current"), slot_offset(t, "tv2")
        lane = classes["Lane"]  # TxnIdState's base: where its state and transaction are
        self.t_state, self.t_txn = slot_offset(lane, "state"), slot_offset(lane, "txn")
        r = self.record_cls = classes["TxnRecord"]
        self.r_outcome, self.r_intent = slot_offset(r, "outcome"), slot_offset(r, "intent")
        self.r_taken_over_ts = slot_offset(r, "taken_over_ts")
        self.r_known = slot_offset(r, "registration_known")
        self.r_registered, self.r_partitions = slot_offset(r, "registered"), slot_offset(r, "partitions")
        self.r_records, self.r_batches = slot_offset(r, "records"), slot_offset(r, "batches")
        self.x_api_version = slot_offset(ex, "api_version")
        self.i_pid, self.i_epoch = slot_offset(i, "producer_id"), slot_offset(i, "epoch")
        self.q_epoch, self.q_next = slot_offset(q, "epoch"), slot_offset(q, "next_seq")
        self.q_last_ts = slot_offset(q, "last_ts")
        self.q_recent, self.q_order = slot_offset(q, "recent"), slot_offset(q, "order")
        self.q_unanswered = slot_offset(q, "unanswered")

    def on_produce(self, state, ex, list out):
        cdef dict producers, txn_ids
        cdef set regressed = None
        cdef bint fenced_reported = False
        if type(state) is not self.state_cls or type(ex) is not self.ex_cls:
            return self.python(state, ex, out)
        batches = _get(ex, self.x_batches)
        if type(batches) is not tuple:
            return self.python(state, ex, out)
        for b in <tuple> batches:  # every batch and header of the classes read here, before any change
            if type(b) is not self.batch_cls or type(_get(b, self.b_header)) is not self.header_cls:
                return self.python(state, ex, out)
        producers = _get(state, self.s_producers)
        txn_ids = _get(state, self.s_txn_ids)
        produce = self.produce
        identity = produce.identity
        see_producer = identity.see_producer
        write = produce.write
        tid = _get(ex, self.x_request).transactional_id or None
        keys = _get(state, self.s_keys)  # the producer keys this fold owns (None: all)
        for b in <tuple> batches:
            h = _get(b, self.b_header)
            if _get(h, self.h_crc_ok) is False:
                continue
            pid = _get(h, self.h_pid)
            epoch = _get(h, self.h_epoch)
            if _get(h, self.h_control) or pid < 0:
                continue
            if tid is None and keys is not None and f"pid:{pid}" not in keys:  # state.owns(f"pid:{pid}")
                continue
            answer = _get(b, self.b_code)
            unverified = _get(b, self.b_unverified) or _get(ex, self.x_unverified)
            c = None
            seen = producers.get(pid)
            if seen is None:
                highest = -1
            else:
                highest = _get(seen, self.p_top_epoch) if type(seen) is self.producer_cls else seen.top_epoch
            p = see_producer(state, pid, epoch, ex, tid)
            if type(p) is not self.producer_cls:  # never: see_producer gives the ProducerStates it keeps
                raise TypeError(f"a producer of {type(p).__name__}")
            if epoch < highest:
                if regressed is None:
                    regressed = set()
                if pid not in regressed:
                    regressed.add(pid)
                    c = produce._claim(ex, b, unverified)
                    identity.epoch_regression(tid, highest, c, out)
            if tid is not None:
                t = txn_ids[tid]  # see_producer made it
                if self._superseded(t, pid, epoch):
                    claim = c or produce._claim(ex, b, unverified)
                    identity.zombie(state, t, claim, out, report_rejection=not fenced_reported)
                    fenced_reported = fenced_reported or answer not in (0, None)
                    if answer == 0:
                        self._count(p, h)
                        if _get(h, self.h_transactional):
                            write(state, t, t.zombie_lane(pid, epoch), ex, b, out, unverified=unverified)
                    continue
                if answer == 0:
                    cur = t.current
                    if (cur is None or cur.producer_id != pid or epoch > cur.epoch) and identity.adopt(
                        t, pid, epoch, ex
                    ):
                        produce.new_instance(state, t, pid, epoch, _get(ex, self.x_request_ts))
            else:
                t = None
                if epoch < highest:
                    if answer == 0:
                        self._count(p, h)
                    continue
            if answer in self.fencing and identity.fenced_by_broker(
                state, t, c or produce._claim(ex, b, unverified), [] if fenced_reported else out
            ):
                fenced_reported = True
                continue
            if self._sequence(state, ex, b, h, p, out, unverified, produce):
                self._count(p, h)
            if t is not None and _get(h, self.h_transactional):
                self._write(state, t, ex, b, h, out, unverified, write)

    cdef _write(self, state, t, ex, b, h, list out, unverified, write):
        """`transactions.write(state, t, t, ex, b, out, unverified=...)`: a write the broker accepted into
        the current instance's ongoing transaction, which it had registered (or under transaction.version
        2, which needs no registration), is counted here; any other is the Python function's."""
        if (
            not self.writes
            or _get(b, self.b_code) != 0
            or type(t) is not self.txn_cls
            or _get(t, self.t_state) is not self.ongoing
        ):
            return write(state, t, t, ex, b, out, unverified=unverified)
        rec = _get(t, self.t_txn)
        if (
            type(rec) is not self.record_cls
            or _get(rec, self.r_outcome) is not None
            or _get(rec, self.r_intent) is not None
            or _get(rec, self.r_taken_over_ts) is not None
        ):
            return write(state, t, t, ex, b, out, unverified=unverified)
        topic, partition = _get(b, self.b_topic), _get(b, self.b_partition)
        tv2 = _get(ex, self.x_api_version) >= 12  # Produce v12+: transaction.version 2
        if not tv2 and _get(rec, self.r_known):
            if (topic, partition) not in <set?> _get(rec, self.r_registered):
                return write(state, t, t, ex, b, out, unverified=unverified)  # not registered: a finding
        if tv2:
            _put(t, self.t_tv2, True)
        (<dict?> _get(rec, self.r_partitions)).setdefault(f"{topic}-{partition}", None)
        _put(rec, self.r_records, _get(rec, self.r_records) + _get(h, self.h_records))
        _put(rec, self.r_batches, _get(rec, self.r_batches) + 1)

    cdef inline void _count(self, p, h):
        """`produce._count` of a batch the broker wrote."""
        _put(p, self.p_batches, _get(p, self.p_batches) + 1)
        _put(p, self.p_records, _get(p, self.p_records) + _get(h, self.h_records))

    cdef bint _superseded(self, t, pid, epoch) except -1:
        """`TxnIdState.is_superseded(pid, epoch)`."""
        if type(t) is not self.txn_cls:  # never: txn_ids holds the TxnIdStates it makes
            return t.is_superseded(pid, epoch)
        if pid in <set?> _get(t, self.t_superseded):
            return True
        if epoch <= (<dict?> _get(t, self.t_fenced_upto)).get(pid, -1):
            return True
        cur = _get(t, self.t_current)
        if cur is None:
            return False
        if type(cur) is not self.instance_cls:
            return cur.producer_id == pid and epoch < cur.epoch
        return _get(cur, self.i_pid) == pid and epoch < _get(cur, self.i_epoch)

    cdef _sequence(self, state, ex, b, h, p, list out, unverified, produce):
        """`produce._sequence` of a batch in order (`_advance` too); the Python function's, from its
        start, for any other (nothing of this one changed before)."""
        cdef dict sequences
        answer = _get(b, self.b_code)
        accepted = answer == 0 or (answer is None and _get(b, self.b_acks) == 0)
        base = _get(h, self.h_sequence)
        if base < 0:
            return accepted
        epoch = _get(h, self.h_epoch)
        key = (_get(h, self.h_pid), _get(b, self.b_topic), _get(b, self.b_partition))
        sequences = _get(state, self.s_sequences)
        seq = sequences.get(key)
        fresh = seq is None
        if seq is not None and type(seq) is not self.seq_cls:  # never: `sequences` holds those made here
            return produce._sequence(state, ex, b, p, out, unverified)
        if fresh or epoch > _get(seq, self.q_epoch):
            expected = 0 if (not fresh or epoch in <set?> _get(p, self.p_started_epochs)) else None
            fresh = True
        elif epoch < _get(seq, self.q_epoch):
            return accepted
        else:
            expected = _get(seq, self.q_next)
        if expected is not None and expected != base:  # not in order: the Python function's
            return produce._sequence(state, ex, b, p, out, unverified)
        if fresh:
            seq = self.seq_cls(epoch, expected, _get(ex, self.x_request_ts))
            sequences[key] = seq
        records = _get(h, self.h_records)
        last = (base + records - 1) % self.seq_mod if records > 1 else base  # last_sequence(base, records)
        if accepted or answer == self.duplicate:
            self._advance(seq, base, last, b, ex, produce.RECENT_BATCHES)
            return True
        if answer is None:
            (<list?> _get(seq, self.q_unanswered)).append((base, last))
        return False

    cdef _advance(self, seq, base, last, b, ex, recent_batches):
        """`produce._advance`."""
        cdef dict recent
        cdef list unanswered
        _put(seq, self.q_next, (last + 1) % self.seq_mod)
        _put(seq, self.q_last_ts, _get(ex, self.x_request_ts))
        unanswered = _get(seq, self.q_unanswered)
        if unanswered:
            unanswered.clear()
        recent = _get(seq, self.q_recent)
        if base not in recent:
            order = _get(seq, self.q_order)
            order.append(base)
            if len(order) > recent_batches:
                recent.pop(order.popleft(), None)
        recent[base] = self.accepted(
            last, _get(b, self.b_base), _get(ex, self.x_conn), _get(ex, self.x_response_ts)
        )
