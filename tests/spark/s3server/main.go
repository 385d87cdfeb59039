// An S3-compatible server in memory (gofakes3) for the connector's checkpoint-on-S3 tests:
// Spark's s3a:// checkpoint and the driver-side helpers talk to it as to any S3 store.
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to serve S3 on")
	flag.Parse()
	faker := gofakes3.New(s3mem.New())
	log.Printf("s3server listening on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, faker.Server()))
}
