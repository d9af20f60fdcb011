"""Backend options: one frozen dataclass per backend, validated the same way everywhere; the Hydra schemas
are derived from them (no default written twice); seed/time_limit_s/threads mean the same for everyone."""

import dataclasses
import typing

import pytest
import yaml

from solvers import available_solvers, get_solver
from solvers.base import CAP_FABRIC_ONLY, CAP_RANDOMIZED, CAP_THREADS, CAP_TIME_LIMIT, solver_class
from solvers.options import COMMON, SolverOptions
from tacos_bench import Collective, Problem
from tacos_bench.errors import SolverError
from tacos_bench.topology import named_topology
from tacos_bench.topology.generators import hetero_cluster, ring
from tacos_bench.runner.conf import foreign_options, SOLVER_SCHEMAS

NAMES = available_solvers()
P = Problem(ring(4), Collective("all_reduce", 1, 4))
HP = Problem(hetero_cluster(2, 1, 2), Collective("all_reduce", 1, 4))   # groups and rails, for hier
FP = Problem(named_topology("switched8_nvls"), Collective("all_reduce", 2, 1))


@pytest.mark.parametrize("name", NAMES)
def test_options_are_one_frozen_dataclass_with_the_common_fields(name):
    cls = solver_class(name).Options
    assert issubclass(cls, SolverOptions) and dataclasses.is_dataclass(cls)
    assert set(COMMON) <= set(cls.names())
    opts = cls.parse({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.seed = 3


@pytest.mark.parametrize("name", NAMES)
def test_common_options_are_validated_the_same_way(name):
    s = get_solver(name)
    for bad, needle in (({"seed": -1}, "seed"), ({"seed": "x"}, "seed"), ({"threads": -2}, "threads"),
                        ({"time_limit_s": 0}, "time_limit_s"), ({"time_limit_s": "soon"}, "time_limit_s"),
                        ({"no_such_option": 1}, "no option")):
        with pytest.raises(SolverError, match=needle):
            s.options(bad)
    assert s.options(threads=0).num_threads >= 1  # 0 = one per usable core, for every backend


@pytest.mark.parametrize("name", NAMES)
def test_hydra_schema_is_derived_from_the_options(name):
    schema = SOLVER_SCHEMAS[name]
    opts = solver_class(name).Options
    fields = {f.name: f.default for f in dataclasses.fields(schema)}
    assert fields.pop("name") == name
    own = {f.name: f.default for f in dataclasses.fields(opts) if f.name != "seed"}
    # every other backend's options are there too, unset, so one sweep can give each backend its own
    foreign = {k: None for k in foreign_options(name)}
    assert fields == {**own, **foreign} and not set(own) & set(foreign)


@pytest.mark.parametrize("name", NAMES)
def test_yaml_files_do_not_restate_defaults(root, name):
    path = root / "conf" / "solver" / f"{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc.get("defaults") == [f"base_{name}", "_self_"]
    assert set(doc) - {"defaults", "name"} == set(), f"{path} restates defaults written in the options class"


@pytest.mark.parametrize("name", NAMES)
def test_capabilities_say_what_the_backend_honours(name):
    s = get_solver(name)
    if not s.supports("all_reduce"):
        pytest.skip(f"{name} has no All-Reduce")
    kw = {"time_limit_s": 30} if "exact" in s.capabilities else {}
    p = HP if name == "hier" else FP if CAP_FABRIC_ONLY in s.capabilities else P
    a = s.solve(p, seed=0, **kw).schedule
    b = s.solve(p, seed=12345, **kw).schedule
    if CAP_RANDOMIZED not in s.capabilities:  # a deterministic backend must really ignore the seed
        assert a.sorted().start_us.tolist() == b.sorted().start_us.tolist()
    assert {CAP_TIME_LIMIT, CAP_THREADS} & s.capabilities or name in ("ring", "direct", "rhd", "dbt", "bfs", "hier",
                                                                         "nvls", "sharp")


def test_options_object_and_keywords_are_the_same():
    s = get_solver("greedy")
    o = s.options(chunk_order="rarest", seed=2)
    assert s.solve(P, o).schedule.makespan_us == s.solve(P, chunk_order="rarest", seed=2).schedule.makespan_us
    assert o.replace(seed=3).seed == 3 and o.seed == 2
    assert typing.get_type_hints(type(o))["time_limit_s"] == typing.Optional[float]
