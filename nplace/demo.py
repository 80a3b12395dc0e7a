"""`make demo`: one line per placement on the tiny preset."""
import jax

from nplace import model
from nplace.config import PLACEMENTS, experiment, validate
from nplace.info import model_info


def main(argv=()):
  """`nplace demo`: takes no flags."""
  from nplace.cli import parse_flags
  parse_flags(list(argv), need_config=False)
  for placement in PLACEMENTS:
    config = experiment("tiny", placement)
    validate(config)
    m = config.model
    params = model.init(m, jax.random.key(config.seed))
    tokens = jax.random.randint(jax.random.key(1), (config.train.batch_size, config.data.seq_len + 1),
                                0, m.vocab_size)
    loss = model.loss(m, params, tokens)
    print(f"{placement:5s} params={model_info(config)['params']:,} "
          f"loss(random tokens)={float(loss):.4f} (ln vocab={jax.numpy.log(m.vocab_size):.4f})")
