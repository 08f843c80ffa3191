package framework

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
)

// podLogs returns the logs of the pods matching selector in namespace,
// oldest pod first; of a restarted container, the previous run's log comes
// first.
func (k *Kind) podLogs(ctx context.Context, namespace, selector, container string) ([]byte, error) {
	pods, err := k.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	if len(pods.Items) == 0 {
		return nil, fmt.Errorf("no pod %s in %s", selector, namespace)
	}
	items := pods.Items
	sort.SliceStable(items, func(i, j int) bool {
		if !items[i].CreationTimestamp.Equal(&items[j].CreationTimestamp) {
			return items[i].CreationTimestamp.Before(&items[j].CreationTimestamp)
		}
		return items[i].Name < items[j].Name
	})
	var out []byte
	for _, p := range items {
		restarted := false
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == container && cs.RestartCount > 0 {
				restarted = true
			}
		}
		if restarted {
			prev, err := k.client.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, Previous: true}).DoRaw(ctx)
			if err == nil {
				out = appendLines(out, prev)
			}
		}
		cur, err := k.client.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("logs of %s/%s: %w", namespace, p.Name, err)
		}
		out = appendLines(out, cur)
	}
	return out, nil
}

// appendLines appends b to out, making sure a line of out is not joined
// with the first line of b.
func appendLines(out, b []byte) []byte {
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, b...)
}

// ProxyLog implements Cluster: the pod log of the proxy (one replica).
func (k *Kind) ProxyLog() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return k.podLogs(ctx, kindNamespace, kindProxySelector, kindProxyContainer)
}

// Decisions implements Cluster.
func (k *Kind) Decisions() ([]DecisionLine, error) {
	data, err := k.ProxyLog()
	if err != nil {
		return nil, err
	}
	return ParseDecisions(bytes.NewReader(data))
}

// DriftReports implements Cluster: the reports the sink logged.
func (k *Kind) DriftReports(namespace, child string) ([]v1alpha1.DriftReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	data, err := k.podLogs(ctx, kindNamespace, kindSinkSelector, "reportsink")
	if err != nil {
		return nil, err
	}
	return parseDriftReports(data, namespace, child), nil
}

// SetConfig implements Cluster: it updates the proxy's config ConfigMap and
// waits until the proxy logs that it reloaded the file. The kubelet updates
// the mounted file on its next sync of the pod (the cluster's kubelet syncs
// every few seconds; see kindClusterConfig), and the proxy polls it every
// second.
func (k *Kind) SetConfig(ctx context.Context, content string) error {
	k.configMu.Lock()
	defer k.configMu.Unlock()
	cms := k.client.CoreV1().ConfigMaps(kindNamespace)
	cm, err := cms.Get(ctx, kindProxyConfigMap, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if cm.Data[kindProxyConfigKey] == content {
		// Loaded already: every change waits for its reload.
		return nil
	}
	log, err := k.ProxyLog()
	if err != nil {
		return err
	}
	before := scanConfigEvents(log)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, kindProxyConfigMap, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[kindProxyConfigKey] = content
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	var refused string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, false, func(context.Context) (bool, error) {
		log, err := k.ProxyLog()
		if err != nil {
			return false, nil
		}
		now := scanConfigEvents(log)
		if len(now.Refused) > len(before.Refused) {
			refused = now.Refused[len(now.Refused)-1]
			return true, nil
		}
		return now.Reloads > before.Reloads, nil
	})
	if refused != "" {
		return fmt.Errorf("the proxy refused the new config: %s", refused)
	}
	if err != nil {
		return fmt.Errorf("the proxy did not load the new config (the kubelet updates the mounted ConfigMap on its pod sync): %w", err)
	}
	return nil
}

// AuditEvents implements Cluster: kube-apiserver's audit log on the
// control-plane node (kindAuditPolicy), read incrementally.
func (k *Kind) AuditEvents() ([]auditv1.Event, error) {
	k.auditMu.Lock()
	defer k.auditMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data, err := k.nodeOutput(ctx, "tail", "-c", fmt.Sprintf("+%d", k.auditOffset+1), kindAuditLogPath)
	if err != nil {
		return nil, err
	}
	k.auditOffset += int64(len(data))
	k.audit = appendAuditEvents(k.audit, k.auditLines.feed(data))
	return k.audit[:len(k.audit):len(k.audit)], nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
