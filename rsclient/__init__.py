"""Client-side plumbing shared by :mod:`publisher` and :mod:`subscriber`.

One implementation each of what both sides of rshub need to talk to a hub or a
ResourceSync Source: the server-sent-events parser (:mod:`rsclient.sse`), the crash-safe
state file (:mod:`rsclient.statefile`), the conditional-GET document client
(:mod:`rsclient.documents`), the discovery walk from a Source Description down to its
Change Lists (:mod:`rsclient.discovery`), the admin API's requests
(:mod:`rsclient.admin_api`) and the back-off policy and retrying loop
(:mod:`rsclient.backoff`, which the hub uses too). Errors: :mod:`rsclient.exceptions`.
Like the packages it serves, it never imports :mod:`hub`.

Each name is imported from the module that defines it: the package root re-exports
nothing, so ``import rsclient.backoff`` stays free of aiohttp and no import is hidden from
the layer contracts behind a lazy façade.
"""
