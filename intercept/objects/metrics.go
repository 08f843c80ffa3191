package objects

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// cachesCollector exports the caches a store holds, one series per
// cache: what the proxy's memory and watch events grow with. A store
// holds at most its most caches of each sort, so the series are bounded.
type cachesCollector struct {
	store *Store
	desc  *prometheus.Desc
}

// CachesCollector exports the caches s holds as kausality_proxy_caches.
func CachesCollector(s *Store) prometheus.Collector {
	return &cachesCollector{store: s, desc: prometheus.NewDesc("kausality_proxy_caches",
		"Caches this replica holds, by what they hold (parents: whole objects of kinds whose controllers' writes were decided, "+
			"or namespaces; children: metadata of the resources intercepted writes are of) and resource. Each holds every object of its resource the caches cover.",
		[]string{"holds", "resource"}, nil)}
}

func (c *cachesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *cachesCollector) Collect(ch chan<- prometheus.Metric) {
	parents, children := c.store.CachedResources()
	for _, held := range []struct {
		holds     string
		resources []schema.GroupVersionResource
	}{{"parents", parents}, {"children", children}} {
		for _, gvr := range held.resources {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, held.holds, gvr.GroupResource().String())
		}
	}
}
