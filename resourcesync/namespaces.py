"""XML namespaces, element names and limits of ResourceSync documents.

Precomputed ``{namespace}local`` (Clark notation) strings let the parser compare
lxml tags with one string comparison each instead of splitting names.
"""

from typing import Final

#: Sitemap namespace, the default namespace of every document (Section 7, Table 2).
SITEMAP_NS: Final = "http://www.sitemaps.org/schemas/sitemap/0.9"
#: ResourceSync namespace, bound to the ``rs`` prefix (Section 7, Table 2).
RS_NS: Final = "http://www.openarchives.org/rs/terms/"
RS_PREFIX: Final = "rs"

URLSET: Final = f"{{{SITEMAP_NS}}}urlset"
SITEMAPINDEX: Final = f"{{{SITEMAP_NS}}}sitemapindex"
URL: Final = f"{{{SITEMAP_NS}}}url"
SITEMAP: Final = f"{{{SITEMAP_NS}}}sitemap"
LOC: Final = f"{{{SITEMAP_NS}}}loc"
LASTMOD: Final = f"{{{SITEMAP_NS}}}lastmod"
CHANGEFREQ: Final = f"{{{SITEMAP_NS}}}changefreq"
RS_MD: Final = f"{{{RS_NS}}}md"
RS_LN: Final = f"{{{RS_NS}}}ln"

#: Sitemaps protocol limit adopted by ResourceSync (Section 1.3, Section 10.2).
MAX_ENTRIES: Final = 50_000
#: Sitemaps protocol limit on an uncompressed document: 50 MB.
MAX_BYTES: Final = 50 * 1024 * 1024
#: Deepest element nesting accepted; real documents are at most 3 levels deep.
MAX_DEPTH: Final = 16

#: Values of ``<changefreq>`` defined by the Sitemaps protocol (Section 7).
CHANGEFREQ_VALUES: Final = frozenset(
    {"always", "hourly", "daily", "weekly", "monthly", "yearly", "never"}
)
#: Hash algorithms accepted in ``hash`` attributes, with their hex digest length (Section 7).
HASH_HEX_LENGTHS: Final = {"md5": 32, "sha-1": 40, "sha-256": 64}
