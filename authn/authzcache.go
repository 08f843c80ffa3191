package authn

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// authorizationCacheSize matches the entry cap of k8s.io/apiserver's
// SubjectAccessReview webhook cache, which this cache replaces.
const authorizationCacheSize = 8192

// maxCachedAttributesSize mirrors the webhook authorizer: attributes whose
// caller-controlled strings are this long or longer are never cached, so a
// caller cannot fill memory with huge names.
const maxCachedAttributesSize = 10000

// cachedAuthorizer answers repeated authorization questions from memory.
// It stands in front of the SubjectAccessReview webhook authorizer, whose
// own cache is switched off: that cache keys its entries with json.Marshal
// of the whole review spec on every call, hit or miss, which was the
// largest CPU cost of an intercepted write that the bare proxy does not
// have. The key here is built from the same attributes with plain string
// appends; the answers, TTLs and entry cap are those of the webhook's cache.
type cachedAuthorizer struct {
	next                           authorizer.Authorizer
	cache                          *cache.LRUExpireCache
	authorizedTTL, unauthorizedTTL time.Duration
}

type cachedDecision struct {
	decision authorizer.Decision
	reason   string
}

func newCachedAuthorizer(next authorizer.Authorizer, authorizedTTL, unauthorizedTTL time.Duration) *cachedAuthorizer {
	return &cachedAuthorizer{
		next:            next,
		cache:           cache.NewLRUExpireCache(authorizationCacheSize),
		authorizedTTL:   authorizedTTL,
		unauthorizedTTL: unauthorizedTTL,
	}
}

func (c *cachedAuthorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	key, cacheable := authorizationKey(attrs)
	if cacheable {
		if v, ok := c.cache.Get(key); ok {
			d := v.(cachedDecision)
			return d.decision, d.reason, nil
		}
	}
	decision, reason, err := c.next.Authorize(ctx, attrs)
	// Errors are never kept: a review that could not be made, or an
	// answer that was both allowed and denied, is asked again next time.
	if err != nil || !cacheable {
		return decision, reason, err
	}
	ttl := c.unauthorizedTTL
	if decision == authorizer.DecisionAllow {
		ttl = c.authorizedTTL
	}
	if ttl > 0 {
		c.cache.Add(key, cachedDecision{decision: decision, reason: reason}, ttl)
	}
	return decision, reason, nil
}

// authorizationKey identifies everything a SubjectAccessReview built from
// attrs would contain. Every field is length-prefixed, so no value can be
// forged to read as another field. Group order is kept, as it is in the
// review the webhook sends; extra is sorted by key, as json.Marshal sorts
// a map.
func authorizationKey(attrs authorizer.Attributes) (string, bool) {
	size := len(attrs.GetNamespace()) + len(attrs.GetVerb()) + len(attrs.GetAPIGroup()) + len(attrs.GetAPIVersion()) +
		len(attrs.GetResource()) + len(attrs.GetSubresource()) + len(attrs.GetName()) + len(attrs.GetPath())
	if size >= maxCachedAttributesSize {
		return "", false
	}
	b := &keyBuilder{}
	b.sb.Grow(size + 128)
	field := b.field
	if u := attrs.GetUser(); u != nil {
		b.user(u)
	}
	if !attrs.IsResourceRequest() {
		b.sb.WriteByte('n')
		field(attrs.GetPath())
		field(attrs.GetVerb())
		return b.sb.String(), true
	}
	b.sb.WriteByte('r')
	for _, s := range []string{attrs.GetNamespace(), attrs.GetVerb(), attrs.GetAPIGroup(), attrs.GetAPIVersion(),
		attrs.GetResource(), attrs.GetSubresource(), attrs.GetName()} {
		field(s)
	}
	// Selectors narrow what is asked; a question with any of them is a
	// different question. Their requirements' canonical strings are part
	// of the key, and parse errors keep the question out of the cache.
	fieldReqs, fieldErr := attrs.GetFieldSelector()
	labelReqs, labelErr := attrs.GetLabelSelector()
	if fieldErr != nil || labelErr != nil {
		return "", false
	}
	b.sb.WriteString(strconv.Itoa(len(fieldReqs)))
	b.sb.WriteByte('f')
	for _, r := range fieldReqs {
		field(string(r.Operator))
		field(r.Field)
		field(r.Value)
	}
	b.sb.WriteString(strconv.Itoa(len(labelReqs)))
	b.sb.WriteByte('l')
	for _, r := range labelReqs {
		field(r.String())
	}
	return b.sb.String(), true
}

// keyBuilder writes length-prefixed fields.
type keyBuilder struct{ sb strings.Builder }

func (b *keyBuilder) field(s string) {
	b.sb.WriteString(strconv.Itoa(len(s)))
	b.sb.WriteByte(':')
	b.sb.WriteString(s)
}

func (b *keyBuilder) list(v []string) {
	b.sb.WriteString(strconv.Itoa(len(v)))
	b.sb.WriteByte('[')
	for _, s := range v {
		b.field(s)
	}
}

func (b *keyBuilder) user(u user.Info) {
	b.sb.WriteByte('u')
	b.field(u.GetName())
	b.field(u.GetUID())
	b.list(u.GetGroups())
	extra := u.GetExtra()
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b.sb.WriteString(strconv.Itoa(len(keys)))
	b.sb.WriteByte('{')
	for _, k := range keys {
		b.field(k)
		b.list(extra[k])
	}
}
