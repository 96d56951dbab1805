"""afr in Grafana: five dashboards over the store, and ``afr grafana push``.

- ``dashboards``  the dashboards as Grafana's JSON model, a module each (``dashboards/*.json``
  are written from it: ``python -m afr.grafana.dashboards``);
- ``queries``     the SQL they share and how it stays fast (docs/adr/0019);
- ``panels``      builders for the JSON model;
- ``interpolate`` what Grafana and the ClickHouse plugin do to a query before ClickHouse
  sees it (template variables, ``$__conditionalAll``, the plugin's macros);
- ``push``        the datasource and dashboards through Grafana's HTTP API;
- ``command``     the ``afr grafana push`` command line.

Nothing is imported here: ``afr`` builds its parser for every command, cheaply.
"""
