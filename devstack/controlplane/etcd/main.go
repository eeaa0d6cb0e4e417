// Command etcd is etcd's own main: the server module's etcdmain, as etcd's release binary runs it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
