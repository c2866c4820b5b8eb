// A consumer that acks each delivery on its own (d.Ack(false)), as most Go
// services do, next to a publisher on its own connection: the consumed
// rate is what it measures. Used by benchmarks/go_ack_each.py; built in
// GOPATH mode against Debian's golang-github-rabbitmq-amqp091-go-dev.
package main

import (
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func main() {
	uri := flag.String("uri", "amqp://guest:guest@127.0.0.1:5672/", "broker")
	queue := flag.String("queue", "go-ack-each", "queue name (declared, purged and deleted)")
	prefetch := flag.Int("prefetch", 10, "basic.qos prefetch count")
	seconds := flag.Float64("seconds", 10, "how long to measure")
	size := flag.Int("size", 16, "body size")
	flag.Parse()

	pubConn, err := amqp.Dial(*uri)
	check(err)
	defer pubConn.Close()
	conConn, err := amqp.Dial(*uri)
	check(err)
	defer conConn.Close()
	pch, err := pubConn.Channel()
	check(err)
	_, err = pch.QueueDeclare(*queue, false, false, false, false, nil)
	check(err)
	body := make([]byte, *size)
	var stop int32
	// the publisher keeps a backlog of at most ~100k messages ahead of the consumer
	var consumed, published int64
	go func() {
		for atomic.LoadInt32(&stop) == 0 {
			if atomic.LoadInt64(&published)-atomic.LoadInt64(&consumed) > 100000 {
				time.Sleep(time.Millisecond)
				continue
			}
			if pch.Publish("", *queue, false, false, amqp.Publishing{Body: body}) != nil {
				return
			}
			atomic.AddInt64(&published, 1)
		}
	}()
	cch, err := conConn.Channel()
	check(err)
	check(cch.Qos(*prefetch, 0, false))
	deliveries, err := cch.Consume(*queue, "", false, false, false, false, nil)
	check(err)
	// warm up for a second, then count
	warm := time.Now().Add(time.Second)
	for d := range deliveries {
		d.Ack(false)
		atomic.AddInt64(&consumed, 1)
		if time.Now().After(warm) {
			break
		}
	}
	start := time.Now()
	base := atomic.LoadInt64(&consumed)
	deadline := start.Add(time.Duration(*seconds * float64(time.Second)))
	for d := range deliveries {
		d.Ack(false)
		n := atomic.AddInt64(&consumed, 1)
		if n&1023 == 0 && time.Now().After(deadline) {
			break
		}
	}
	elapsed := time.Since(start).Seconds()
	atomic.StoreInt32(&stop, 1)
	fmt.Printf("{\"prefetch\": %d, \"consumed_per_s\": %.0f}\n", *prefetch, float64(atomic.LoadInt64(&consumed)-base)/elapsed)
	cch.Close()
	pch.QueueDelete(*queue, false, false, false)
	os.Exit(0)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
