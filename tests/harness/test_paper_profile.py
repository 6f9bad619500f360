"""The paper profile's path: hub ids that load with `datasets` 4, the run plan, and the dry-run profile."""

from dynatree_lib.harness.setup import data
from dynatree_lib.cli import main
from dynatree_lib.reporting.plan import plan
from dynatree_lib.harness.setup.profiles import get_profile


class _Fake:
    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, k):
        return [r[k] for r in self.rows]

    def __iter__(self):
        return iter(self.rows)


def test_hub_ids_are_parquet_datasets(monkeypatch):
    """`deepmind/pg19` is a loading-script dataset that datasets 4 refuses: we ask for the parquet copies."""
    import datasets

    asked = []

    def fake(name, *args, **kw):
        asked.append((name, args, kw.get("split")))
        if "pg19" in name:
            return _Fake([{"url": "http://www.gutenberg.org/ebooks/10146", "text": "x" * 50}])
        return _Fake([{"text": " = A = \n"}, {"text": "words\n"}])

    monkeypatch.setattr(datasets, "load_dataset", fake)
    assert data.load_texts("pg19", source="hub") == [("10146", "x" * 50)]
    assert data.load_texts("wikitext2", source="hub")[0][1].startswith(" = A")
    assert asked == [("emozilla/pg19-test", (), "test"), ("Salesforce/wikitext", ("wikitext-2-raw-v1",), "test")]


def test_plan_prints_generations_and_hours(capsys):
    full = plan(get_profile("paper"))
    quick = plan(get_profile("paper", n_prompts=2, n_exact=1, warmup=1), quick=True)
    total = sum(r["generations"] for r in full)
    assert 1500 < total < 4000 and 1 < sum(r["hours"] for r in full) < 20
    assert sum(r["generations"] for r in quick) < total / 5
    assert not {r["notebook"] for r in quick} & {"05_length_scaling", "06_sweeps", "07_prompt_length"}
    assert main(["plan", "--profile", "paper"]) == 0
    out = capsys.readouterr().out
    assert "est. hours" in out and "total" in out and "06_sweeps" in out and "paper's Table 1" in out


def test_plan_prices_the_extension_as_dynatree_until_its_tuning_is_logged(monkeypatch):
    """New forward costs change the extension's candidates: until they are tuned, the plan still prints, with a
    cost-aware cell costing what a DynaTree cell does."""
    from dynatree_lib.harness.experiments import cells, tuning

    def not_tuned(*_args, **_kw):
        raise tuning.NotTuned("no tuning records of this code's dynatree_cost candidates")

    prof = get_profile("smoke")
    monkeypatch.setattr(cells, "cost_aware", not_tuned)
    rows = {r["notebook"]: r for r in plan(prof)}
    assert rows["01_main_results"]["generations"] > 0


def test_dryrun_profile_mirrors_the_paper_profile():
    paper, dry = get_profile("paper"), get_profile("paper-dryrun")
    assert dry.models.dtype in ("bfloat16", "float16") and dry.models.exact_dtype == "float32"
    assert dry.models.context_override == paper.models.context_override and dry.tuning.candidates is None
    assert dry.paper.fixed == paper.paper.fixed and dry.paper.dynatree == paper.paper.dynatree
    assert dry.paper.talon == paper.paper.talon
    assert len(dry.sweeps.T_list) == len(paper.sweeps.T_list) and len(dry.sweeps.L_max_list) == len(paper.sweeps.L_max_list)
    from dynatree_lib.harness.setup.models import load_model

    m, _ = load_model(dry.models.target)
    assert m.config.vocab_size == 50304 and m.config.use_parallel_residual
    assert m.config.to_dict()["rope_parameters"]["partial_rotary_factor"] == 0.25
