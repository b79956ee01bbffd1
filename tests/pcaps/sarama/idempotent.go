// A Sarama producer (Debian's golang-github-shopify-sarama-dev, 1.22), idempotent unless
// -idempotent=false: the corpus scenario sarama_idempotent_tansu (scen_sarama.py). It writes -n records
// one at a time, alternating between partitions 0 and 1, and prints one JSON line: its configuration, what
// each send returned, and the producer id and epoch Sarama said it obtained (from its own log). Sarama's
// log goes to stderr.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/Shopify/sarama"
)

var obtained = regexp.MustCompile(`Obtained a ProducerId: (-?\d+) and ProducerEpoch: (-?\d+)`)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap broker")
	topic := flag.String("topic", "idem", "topic")
	n := flag.Int("n", 6, "records")
	clientID := flag.String("client-id", "corpus-sarama-idempotent", "client id")
	idempotent := flag.Bool("idempotent", true, "Producer.Idempotent (false: an ordinary producer, same acks)")
	flag.Parse()
	var saramaLog bytes.Buffer
	sarama.Logger = log.New(io.MultiWriter(os.Stderr, &saramaLog), "[sarama] ", log.Lmicroseconds)

	cfg := sarama.NewConfig()
	cfg.ClientID = *clientID
	cfg.Version = sarama.V2_0_0_0 // Produce v3+: record batches with producer ids
	cfg.Producer.Idempotent = *idempotent
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Retry.Max = 1
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner

	out := map[string]interface{}{
		"client_id": *clientID, "idempotent": cfg.Producer.Idempotent, "acks": int(cfg.Producer.RequiredAcks),
		"max_open_requests": cfg.Net.MaxOpenRequests, "version": cfg.Version.String(),
	}
	defer func() {
		if m := obtained.FindStringSubmatch(saramaLog.String()); m != nil {
			pid, _ := strconv.ParseInt(m[1], 10, 64)
			epoch, _ := strconv.ParseInt(m[2], 10, 16)
			out["obtained_producer_id"], out["obtained_producer_epoch"] = pid, epoch
		}
		_ = json.NewEncoder(os.Stdout).Encode(out)
	}()
	client, err := sarama.NewClient([]string{*brokers}, cfg)
	if err != nil {
		out["client_error"] = err.Error()
		return
	}
	defer client.Close()
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		out["producer_error"] = err.Error()
		return
	}
	acked := []map[string]interface{}{}
	failed := []string{}
	for i := 0; i < *n; i++ {
		msg := &sarama.ProducerMessage{Topic: *topic, Partition: int32(i % 2),
			Value: sarama.StringEncoder(fmt.Sprintf("sarama record %d", i))}
		part, off, err := producer.SendMessage(msg)
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		acked = append(acked, map[string]interface{}{"partition": part, "offset": off})
		time.Sleep(20 * time.Millisecond)
	}
	_ = producer.Close()
	out["acked"], out["failed"] = acked, failed
}
