"""What the cluster package keeps by list and watch: nodes, namespaces, RuntimeClasses and
ResourceQuotas (``inventorysource``), DRA objects (``devicesource``), autoscaler objects
(``poolsource``), rule objects (``rulesource``), and a worker's copy of them all, fed by the
pod's watcher (``feedsource``, over ``feedwire``)."""
