"""NCL on scikit-learn's 8x8 digits, trained with a plain Lightning ``Trainer``.

    python examples/python/train_ncl_digits.py [EPOCHS]    # default 10 epochs

What ``configs/demo/digits_ncl.yaml`` trains with ``ncl-cli`` (docs/python.md maps one to
the other); prints the online kNN accuracy and the sparsity of the NCL features ``z``.
"""

import sys

import lightning as L

from ncl_lightning import NCL, DigitsDataModule, FeatureStatistics, SmallCNN

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
L.seed_everything(0)
data = DigitsDataModule(batch_size=128, augment_on="device")  # lr scaled by 128 / 256
model = NCL(SmallCNN(in_channels=1), proj_hidden_dim=256, proj_output_dim=64, warmup_epochs=2)
trainer = L.Trainer(
    max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
    callbacks=[FeatureStatistics(spaces=["z"], sepin=False)],
)  # fmt: skip
trainer.fit(model, data)  # num_classes (online probe and kNN) comes from the DataModule
metrics = trainer.callback_metrics
print(f"kNN accuracy {metrics['val/knn_acc']:.3f}, z sparsity {metrics['val/z/sparsity']:.3f}")
