// Command etcd is upstream etcd v3.6 built from go.etcd.io/etcd/server/v3.
// It lives in its own module so its dependencies are not unified with
// Kubernetes'.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
