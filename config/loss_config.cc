#include "config/loss_config.h"

namespace fedmesh {

std::vector<ConfigKey> LossConfigKeys(const std::string& loss_doc) {
  std::vector<ConfigKey> keys;
  keys.push_back(StringKey("train", "loss", "cross_entropy", loss_doc)
                     .Choices({"cross_entropy", "bce_with_logits", "mse", "huber"}));
  keys.push_back(FloatListKey("train", "class_weights", {},
                              "cross_entropy: one weight per class (PyTorch's weight=); empty = 1 each")
                     .Min(0, true));
  keys.push_back(FloatKey("train", "pos_weight", 1.0,
                          "bce_with_logits: weight of the positive class's term (PyTorch's pos_weight)")
                     .Min(0, true));
  return keys;
}

Status ReadLossOptions(const ConfigValues& v, LossOptions* loss) {
  loss->kind = ParseLossKind(v.GetString("train", "loss")).value();
  loss->class_weights.clear();
  for (double w : v.GetFloatList("train", "class_weights")) loss->class_weights.push_back(static_cast<float>(w));
  loss->pos_weight = static_cast<float>(v.GetFloat("train", "pos_weight"));
  return AttributeToKey(ValidateLossOptions(*loss), v,
                        {{"class_weights", "train", "class_weights"}, {"pos_weight", "train", "pos_weight"}});
}

}  // namespace fedmesh
