# mutant: missing_fabric_accepted
# exercise: transfer_ledger
# mistake: files a cross-pool edge without fabric_id under a None fabric instead of rejecting the ledger.
import math


def transfer_ledger(edges, placement):
    rows, total_bytes, exposed_by_fabric, bandwidth_by_fabric = [], 0.0, {}, {}
    for edge in edges:
        source, target = edge["source"], edge["target"]
        if source not in placement or target not in placement:
            raise ValueError("both endpoints of an edge need a pool")
        size, items = float(edge["bytes_per_item"]), float(edge["items_per_work_unit"])
        units, bandwidth = float(edge["work_units_per_second"]), float(edge["bandwidth_bytes_per_s"])
        overlap = float(edge.get("overlap_fraction", 0.0))
        if not all(math.isfinite(value) for value in (size, items, units, bandwidth, overlap)):
            raise ValueError("edge numbers must be finite")
        if size < 0 or units < 0 or items <= 0 or bandwidth <= 0 or not 0 <= overlap <= 1:
            raise ValueError("edge numbers out of range")
        cross_pool = placement[source] != placement[target]
        traffic = transfer = exposed = 0.0
        if cross_pool:
            fabric = edge.get("fabric_id")
            if not math.isclose(bandwidth_by_fabric.setdefault(fabric, bandwidth), bandwidth, rel_tol=1e-9):
                raise ValueError("one fabric, one bandwidth")
            traffic = size * items * units
            transfer = traffic / bandwidth
            exposed = transfer * (1.0 - overlap)
            total_bytes += traffic
            exposed_by_fabric[fabric] = exposed_by_fabric.get(fabric, 0.0) + exposed
        rows.append({**edge, "cross_pool": cross_pool, "traffic_bytes_per_s": traffic,
                     "transfer_seconds_per_s": transfer, "exposed_seconds_per_s": exposed})
    critical = max(exposed_by_fabric.values(), default=0.0)
    critical_fabrics = sorted((f for f, v in exposed_by_fabric.items() if math.isclose(v, critical, rel_tol=1e-9)),
                              key=str)
    return {"cross_pool_bytes_per_s": total_bytes, "fabric_exposed_seconds_per_s": exposed_by_fabric,
            "critical_exposed_seconds_per_s": critical, "critical_fabrics": critical_fabrics, "rows": rows}
