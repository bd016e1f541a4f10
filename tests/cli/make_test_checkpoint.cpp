// Test fixture maker for the eval CLI test: writes a freshly initialized
// checkpoint of a preset (config.json + model.safetensors, unsharded) and a
// raw uint16 token file of random ids below the vocabulary.
//   make_test_checkpoint PRESET DIR TOKENS_FILE TOKEN_COUNT
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "colrow/dist/local_communicator.h"
#include "colrow/nn/checkpoint.h"
#include "colrow/nn/gpt_model.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s PRESET DIR TOKENS_FILE TOKEN_COUNT\n", argv[0]);
    return 2;
  }
  const colrow::ModelConfig config = colrow::model_preset(argv[1]);
  colrow::LocalCommunicator alone;
  colrow::GptModel model(alone, config, /*seed=*/11);
  colrow::save_checkpoint(model, argv[2], alone);

  std::mt19937 gen(5);
  FILE* f = std::fopen(argv[3], "wb");
  if (f == nullptr) return 1;
  const long count = std::atol(argv[4]);
  for (long i = 0; i < count; ++i) {
    const unsigned id = gen() % static_cast<unsigned>(config.vocab_size);
    const unsigned char bytes[2] = {static_cast<unsigned char>(id),
                                    static_cast<unsigned char>(id >> 8)};
    std::fwrite(bytes, 1, 2, f);
  }
  return std::fclose(f) == 0 ? 0 : 1;
}
