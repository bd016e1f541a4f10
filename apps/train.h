// `colrow train`: the flags, declared once (name, default, help, check).
#pragma once

#include <CLI/CLI.hpp>

#include "colrow/train/trainer.h"

namespace colrow::apps {

CLI::App* add_train(CLI::App& app, TrainOptions& options);

}  // namespace colrow::apps
