"""OODReport: the OOD table by hand and after a real ``Trainer.test``."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import pytest
import torch

from ncl_lightning.callbacks.ood_report import OODReport, ood_table
from ncl_lightning.data import load_imagenet100_classes
from ncl_lightning.data.ood import ImageNetOODDataModule
from tests.data.test_ood import CORRUPTIONS, NAMES, make_ood_tree

VALUES = {
    "stylized": 0.1234,
    "sketch": 0.5,
    "imagenet_c/snow/1": 0.60,
    "imagenet_c/snow/3": 0.40,
    "imagenet_c/gaussian_noise/1": 0.70,
    "imagenet_c/gaussian_noise/3": 0.20,
}


def test_ood_table_means() -> None:
    markdown, summary = ood_table(VALUES)
    # By hand: snow (0.60 + 0.40) / 2 = 0.50; gaussian_noise (0.70 + 0.20) / 2 = 0.45;
    # all four: 1.90 / 4 = 0.475; severity 1: 0.65, severity 3: 0.30.
    c = summary["imagenet_c"]
    assert summary["sets"] == {"stylized": 0.1234, "sketch": 0.5}
    assert c["mean"] == pytest.approx(0.475)
    assert c["severity_mean"] == pytest.approx({"1": 0.65, "3": 0.30})
    assert c["corruptions"]["snow"]["mean"] == pytest.approx(0.50)
    assert c["corruptions"]["snow"]["severities"] == pytest.approx({"1": 0.60, "3": 0.40})
    assert c["corruptions"]["gaussian_noise"]["mean"] == pytest.approx(0.45)
    assert list(c["corruptions"]) == ["snow", "gaussian_noise"]
    lines = markdown.strip().splitlines()
    assert lines[0] == "| set (acc_top1, %) | mean | severity 1 | severity 3 |"
    assert lines[2:] == [
        "| stylized | 12.34 |  |  |",
        "| sketch | 50.00 |  |  |",
        "| imagenet_c (mean) | 47.50 | 65.00 | 30.00 |",
        "| imagenet_c/snow | 50.00 | 60.00 | 40.00 |",
        "| imagenet_c/gaussian_noise | 45.00 | 70.00 | 20.00 |",
    ]
    json.dumps(summary)  # JSON-able


def test_ood_table_uneven_grid_and_no_imagenet_c() -> None:
    _, summary = ood_table(
        {"imagenet_c/fog/1": 0.2, "imagenet_c/fog/2": 0.4, "imagenet_c/snow/1": 0.9}
    )
    assert summary["imagenet_c"]["mean"] == pytest.approx(0.5)  # (0.2 + 0.4 + 0.9) / 3
    assert summary["imagenet_c"]["severity_mean"] == pytest.approx({"1": 0.55, "2": 0.4})
    markdown, summary = ood_table({"sketch": 0.25}, metric="acc_top5")
    assert "imagenet_c" not in summary and markdown.splitlines()[-1] == "| sketch | 25.00 |"
    assert markdown.startswith("| set (acc_top5, %) | mean |")


class ConstantAccuracy(L.LightningModule):
    """Logs a fixed ``test/<name>/acc_top1`` per test DataLoader, as the classifier does."""

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int,
                  dataloader_idx: int = 0) -> None:  # fmt: skip
        name = self.trainer.datamodule.test_names[dataloader_idx]
        images, _ = batch
        assert images.shape[1:] == (3, 224, 224)
        value = torch.tensor(VALUES[name])
        self.log(f"test/{name}/acc_top1", value, add_dataloader_idx=False)


def test_report_after_trainer_test(tmp_path: Path) -> None:
    classes = load_imagenet100_classes()
    wnids = [classes[3], classes[1]]
    (tmp_path / "classes.txt").write_text("\n".join(wnids) + "\n")
    roots = make_ood_tree(tmp_path / "data", wnids)
    dm = ImageNetOODDataModule(
        **roots,
        class_list=str(tmp_path / "classes.txt"),
        corruptions=CORRUPTIONS,
        severities=[1, 3],
        batch_size=2,
        num_workers=0,
    )
    assert dm.test_names == NAMES
    report = OODReport()
    trainer = L.Trainer(
        accelerator="cpu",
        logger=False,
        default_root_dir=str(tmp_path / "run"),
        callbacks=[report],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.test(ConstantAccuracy(), datamodule=dm, verbose=False)
    markdown = (tmp_path / "run" / "ood_results.md").read_text()
    assert markdown == ood_table(VALUES)[0]
    summary = json.loads((tmp_path / "run" / "ood_results.json").read_text())
    assert summary["sets"] == pytest.approx({"stylized": 0.1234, "sketch": 0.5})
    assert summary["imagenet_c"]["mean"] == pytest.approx(0.475)
    assert report.last_paths["json"] == tmp_path / "run" / "ood_results.json"


def test_report_ignores_datamodules_without_test_names(tmp_path: Path) -> None:
    class Plain(L.LightningDataModule):
        def test_dataloader(self) -> torch.utils.data.DataLoader:
            data = [(torch.zeros(3, 224, 224), 0)]
            return torch.utils.data.DataLoader(data, batch_size=1)

    class Quiet(L.LightningModule):
        def test_step(self, batch: object, batch_idx: int) -> None:
            pass

    trainer = L.Trainer(accelerator="cpu", logger=False, default_root_dir=str(tmp_path),
                        callbacks=[OODReport()], enable_progress_bar=False,
                        enable_model_summary=False)  # fmt: skip
    trainer.test(Quiet(), datamodule=Plain(), verbose=False)
    assert not (tmp_path / "ood_results.md").exists()


def test_bad_filename() -> None:
    with pytest.raises(ValueError, match=r"OODReport filename .*'out.json'"):
        OODReport(filename="out.json")
