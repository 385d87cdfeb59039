// Command interop drives the official RocketMQ 5 Go client against a broker and prints one line,
// RESULT {json}. Its commands and JSON match tests/interop/clients/rmq.py (the Python client's
// driver), so one pytest suite runs every language: produce, transaction, simple, push.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

type args map[string]string

// parse reads --name value pairs; a name followed by another name is a flag.
func parse(argv []string) args {
	out := args{}
	for i := 0; i < len(argv); i++ {
		name := strings.TrimPrefix(argv[i], "--")
		if i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "--") {
			out[name] = argv[i+1]
			i++
		} else {
			out[name] = "true"
		}
	}
	return out
}

func (a args) int(name string, fallback int) int {
	if v, ok := a[name]; ok {
		n, err := strconv.Atoi(v)
		if err == nil {
			return n
		}
	}
	return fallback
}

func config(a args) *rmq.Config {
	// the client refuses a nil credential: "absent keys" are the empty ones, sent as an empty credential
	return &rmq.Config{Endpoint: a["endpoint"], ConsumerGroup: a["group"],
		Credentials: &credentials.SessionCredentials{AccessKey: a["ak"], AccessSecret: a["sk"]}}
}

func describe(err error) string {
	for errors.Unwrap(err) != nil {
		err = errors.Unwrap(err)
	}
	return fmt.Sprintf("%T: %v", err, err)
}

func message(a args, body string) *rmq.Message {
	m := &rmq.Message{Topic: a["topic"], Body: []byte(body)}
	m.SetKeys("k-" + body)
	m.AddProperty("origin", "interop")
	if tag, ok := a["tag"]; ok {
		m.SetTag(tag)
	}
	if group, ok := a["message-group"]; ok {
		m.SetMessageGroup(group)
	}
	if _, ok := a["delay-s"]; ok {
		m.SetDelayTimestamp(time.Now().Add(time.Duration(a.int("delay-s", 0)) * time.Second))
	}
	return m
}

func receipt(r *rmq.SendReceipt) map[string]any {
	return map[string]any{"message_id": r.MessageID, "transaction_id": r.TransactionId, "offset": r.Offset}
}

func produce(a args) (any, error) {
	p, err := rmq.NewProducer(config(a), rmq.WithTopics(a["topic"]))
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	defer p.GracefulStop()
	sent, errs := []any{}, []string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	prefix := a["prefix"]
	if prefix == "" {
		prefix = "m"
	}
	for i := 0; i < a.int("count", 1); i++ {
		m := message(a, fmt.Sprintf("%s-%d", prefix, i))
		if _, ok := a["async"]; ok {
			wg.Add(1)
			p.SendAsync(context.Background(), m, func(_ context.Context, rs []*rmq.SendReceipt, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, describe(err))
					return
				}
				for _, r := range rs {
					sent = append(sent, receipt(r))
				}
			})
			continue
		}
		rs, err := p.Send(context.Background(), m)
		if err != nil {
			errs = append(errs, describe(err))
			continue
		}
		for _, r := range rs {
			sent = append(sent, receipt(r))
		}
	}
	wg.Wait()
	return map[string]any{"sent": sent, "errors": errs}, nil
}

func transaction(a args) (any, error) {
	mode := a["mode"]
	commit := mode == "commit" || mode == "orphan-commit"
	var mu sync.Mutex
	checked := map[string]bool{}
	checker := &rmq.TransactionChecker{Check: func(mv *rmq.MessageView) rmq.TransactionResolution {
		mu.Lock()
		checked[string(mv.GetBody())] = true
		mu.Unlock()
		if commit {
			return rmq.COMMIT
		}
		return rmq.ROLLBACK
	}}
	p, err := rmq.NewProducer(config(a), rmq.WithTopics(a["topic"]), rmq.WithTransactionChecker(checker))
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	defer p.GracefulStop()
	count := a.int("count", 1)
	prefix := a["prefix"]
	if prefix == "" {
		prefix = "m"
	}
	sent, errs := []any{}, []string{}
	for i := 0; i < count; i++ {
		tx := p.BeginTransaction()
		rs, err := p.SendWithTransaction(context.Background(), message(a, fmt.Sprintf("%s-%d", prefix, i)), tx)
		if err != nil {
			errs = append(errs, describe(err))
			continue
		}
		for _, r := range rs {
			sent = append(sent, receipt(r))
		}
		switch mode {
		case "commit":
			err = tx.Commit()
		case "rollback":
			err = tx.RollBack()
		}
		if err != nil {
			errs = append(errs, describe(err))
		}
	}
	if strings.HasPrefix(mode, "orphan") {
		deadline := time.Now().Add(time.Duration(a.int("timeout", 30)) * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			n := len(checked)
			mu.Unlock()
			if n >= count {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		time.Sleep(time.Second) // let the checker's EndTransaction calls land
	}
	mu.Lock()
	names := []string{}
	for body := range checked {
		names = append(names, body)
	}
	mu.Unlock()
	sort.Strings(names)
	return map[string]any{"sent": sent, "checked": names, "errors": errs}, nil
}

func view(mv *rmq.MessageView) map[string]any {
	out := map[string]any{"body": string(mv.GetBody()), "message_id": mv.GetMessageId(),
		"attempt": mv.GetDeliveryAttempt(), "keys": mv.GetKeys(), "properties": mv.GetProperties(),
		"offset": mv.GetOffset(), "receipt_handle": mv.GetReceiptHandle(), "acked": false,
		"tag": nil, "message_group": nil, "born_host": nil, "born_timestamp": nil, "delivery_timestamp": nil}
	if mv.GetProperties() == nil {
		out["properties"] = map[string]string{}
	}
	if t := mv.GetTag(); t != nil {
		out["tag"] = *t
	}
	if g := mv.GetMessageGroup(); g != nil {
		out["message_group"] = *g
	}
	if h := mv.GetBornHost(); h != nil {
		out["born_host"] = *h
	}
	if t := mv.GetBornTimestamp(); t != nil {
		out["born_timestamp"] = t.UnixMilli()
	}
	if t := mv.GetDeliveryTimestamp(); t != nil {
		out["delivery_timestamp"] = t.UnixMilli()
	}
	return out
}

func simple(a args) (any, error) {
	filter := rmq.SUB_ALL
	if tag, ok := a["tag"]; ok {
		filter = rmq.NewFilterExpression(tag)
	}
	c, err := rmq.NewSimpleConsumer(config(a), rmq.WithSimpleAwaitDuration(time.Duration(a.int("await-s", 2))*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{a["topic"]: filter}))
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	defer c.GracefulStop()
	behaviour := a["behaviour"]
	if behaviour == "" {
		behaviour = "ack"
	}
	expect := a.int("expect", 1)
	invisible := time.Duration(a.int("invisible", 10)) * time.Second
	changeTo := time.Duration(a.int("change-to", 1)) * time.Second
	received, errs := []map[string]any{}, []string{}
	batches := []int{}
	batch := a.int("batch", 32)
	acked := 0
	deadline := time.Now().Add(time.Duration(a.int("timeout", 30)) * time.Second)
	for time.Now().Before(deadline) && acked < expect {
		mvs, err := c.Receive(context.Background(), int32(batch), invisible)
		if err != nil {
			text := describe(err)
			if !strings.Contains(text, "40401") && !strings.Contains(strings.ToLower(text), "no new message") {
				errs = append(errs, text)
			}
			continue
		}
		batches = append(batches, len(mvs))
		for _, mv := range mvs {
			entry := view(mv)
			received = append(received, entry)
			if behaviour == "ack-after-expiry" {
				// the invisible time passes: ack and change-invisible must then be refused
				time.Sleep(invisible + time.Second)
				if err := c.Ack(context.Background(), mv); err != nil {
					entry["ack_error"] = describe(err)
				} else {
					entry["acked"] = true
				}
				if err := c.ChangeInvisibleDuration(mv, changeTo); err != nil {
					entry["change_error"] = describe(err)
				}
				return map[string]any{"received": received, "errors": errs, "batches": batches}, nil
			}
			first := mv.GetDeliveryAttempt() == 1
			if behaviour == "ack" || (behaviour == "nack-once" && !first) || (behaviour == "change-invisible" && !first) {
				if err := c.Ack(context.Background(), mv); err != nil {
					errs = append(errs, describe(err))
				} else {
					entry["acked"] = true
					acked++
				}
			} else if behaviour == "change-invisible" {
				if err := c.ChangeInvisibleDuration(mv, changeTo); err != nil {
					errs = append(errs, describe(err))
				}
			}
		}
	}
	return map[string]any{"received": received, "errors": errs, "batches": batches}, nil
}

func push(a args) (any, error) {
	var mu sync.Mutex
	bodies := []string{}
	listener := &rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
		mu.Lock()
		bodies = append(bodies, string(mv.GetBody()))
		mu.Unlock()
		return rmq.SUCCESS
	}}
	c, err := rmq.NewPushConsumer(config(a), rmq.WithPushAwaitDuration(2*time.Second),
		rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{a["topic"]: rmq.SUB_ALL}),
		rmq.WithPushMessageListener(listener))
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	// no GracefulStop: it waits out the consumer's long poll (the broker's 20 s); every message
	// consumed was acked when its listener returned, so the driver just exits
	expect := a.int("expect", 1)
	deadline := time.Now().Add(time.Duration(a.int("timeout", 30)) * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(bodies)
		mu.Unlock()
		if n >= expect {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Duration(a.int("linger", 1)) * time.Second) // duplicates would show up here
	mu.Lock()
	defer mu.Unlock()
	return map[string]any{"bodies": append([]string{}, bodies...)}, nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: interop COMMAND --endpoint HOST:PORT ...")
		os.Exit(2)
	}
	a := parse(os.Args[2:])
	// TLS unless --plaintext: the client's default, which the broker's port takes beside plaintext
	rmq.EnableSsl = a["plaintext"] != "true"
	commands := map[string]func(args) (any, error){"produce": produce, "transaction": transaction,
		"simple": simple, "push": push}
	var result any
	if fn, ok := commands[os.Args[1]]; !ok {
		result = map[string]any{"fatal": "unknown command " + os.Args[1]}
	} else if r, err := fn(a); err != nil {
		result = map[string]any{"fatal": describe(err)}
	} else {
		result = r
	}
	line, _ := json.Marshal(result)
	fmt.Println("RESULT " + string(line))
}
