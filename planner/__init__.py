"""meshplan's core: specs, catalogs, cost model and search. Imports none of meshplan's other packages."""
